"""The outbound fetch guard: every HTTP request Amber makes to the outside goes through here.

Amber fetches URLs that agents and users hand it, so a fetch is a classic SSRF vector: a URL
(or a redirect, or a DNS answer) pointing at ``127.0.0.1``, a private network or a cloud
metadata endpoint would let a caller read what only the server can reach.

- :mod:`archive.fetch.policy`: which addresses may be reached (private, loopback, metadata
  and reserved ranges are refused; ``AMBER_FETCH_ALLOW`` opens hosts and CIDRs, each on
  the ports its entry names: 80 and 443 unless ``:port`` or ``:*`` says otherwise).
- :mod:`archive.fetch.transport`: the guarded transport, which resolves a name once, vets
  every address and connects only to a vetted one (no DNS rebinding window, no env proxies).
- :mod:`archive.fetch.fetcher`: the fetch itself — ``http``/``https`` only, redirects
  followed and vetted hop by hop, bodies capped, failures as :class:`FetchError` naming the
  host, never response content.

Use :func:`fetch` / :func:`fetch_async` for one document, or :func:`guarded_client` /
:func:`guarded_async_client` for a pooled client shared across many fetches (pass it as
``client=``). A guarded client used directly refuses blocked destinations the same way, but
does not follow redirects or cap bodies — that is what ``fetch`` adds.
"""

from archive.fetch.fetcher import KEPT_HEADERS, FetchedDocument, fetch, fetch_async
from archive.fetch.policy import (
    DEFAULT_PORTS,
    AllowEntry,
    AllowList,
    blocked_reason,
    is_metadata,
    parse_allow_entry,
)
from archive.fetch.transport import (
    AsyncGuardedBackend,
    GuardedBackend,
    guarded_async_client,
    guarded_client,
    resolve,  # to simulate DNS, replace archive.fetch.transport.resolve, not this name
)

__all__ = [
    "DEFAULT_PORTS",
    "KEPT_HEADERS",
    "AllowEntry",
    "AllowList",
    "AsyncGuardedBackend",
    "FetchedDocument",
    "GuardedBackend",
    "blocked_reason",
    "fetch",
    "fetch_async",
    "guarded_async_client",
    "guarded_client",
    "is_metadata",
    "parse_allow_entry",
    "resolve",
]
