"""The public base URL: the prefix of every URI-M, agreed by every process sharing an index.

A URI-M is a permanent identifier, so the base cannot come from each process's environment
or from the port a server happens to listen on. The first process that needs it (a server
starting, or a CLI command printing a URI-M) records it in the index; from then on every
process uses the recorded base, and only an explicit :func:`move_base_url` changes it.

What a process brings, in order of authority:

1. the recorded base, if any: used as it is;
2. ``AMBER_PUBLIC_BASE_URL``: recorded if nothing is; refused (:class:`BaseUrlMismatch`) if
   it names another base than the recorded one, since minting URI-Ms under it would give
   one memento two names;
3. a fallback (the address the server binds, or :data:`DEFAULT_PUBLIC_BASE_URL` for the
   CLI): recorded if nothing is, otherwise ignored (the caller may say so).
"""

from __future__ import annotations

from dataclasses import dataclass

from archive.config import normalise_base_url
from archive.exceptions import BaseUrlMismatch, ConfigurationError
from archive.index.recorded import RecordedSettings

# Where ``amber serve`` listens without options: the CLI's fallback when no server has
# recorded a base yet.
DEFAULT_PUBLIC_BASE_URL = "http://127.0.0.1:8000"
RECORD_NAME = "public_base_url"


@dataclass(frozen=True)
class SettledBaseUrl:
    """The base a process mints URI-Ms under, and how it was reached."""

    url: str
    recorded_now: bool  # this process recorded it (first use of the index)
    ignored_fallback: str | None  # a fallback other than the recorded base, left unused


def settle_base_url(
    recorded: RecordedSettings, configured: str | None, fallback: str | None
) -> SettledBaseUrl:
    """The base URL to mint URI-Ms under, recording ``configured`` or ``fallback`` when the
    index has none yet. Raises :class:`BaseUrlMismatch` when ``configured`` names another
    base than the recorded one, and :class:`ConfigurationError` when there is nothing to
    record (no recorded base, nothing configured, no fallback)."""
    wanted = normalise_base_url(configured) if configured is not None else None
    proposal = wanted or (normalise_base_url(fallback) if fallback is not None else None)
    existing = recorded.get(RECORD_NAME)
    recorded_now = False
    if existing is None:
        if proposal is None:
            raise ConfigurationError(
                "no public base URL is recorded for this index and none is configured: set "
                "AMBER_PUBLIC_BASE_URL to the address clients reach Amber at"
            )
        existing = recorded.record_first(RECORD_NAME, proposal)
        recorded_now = existing == proposal
    if wanted is not None and wanted != existing:
        raise BaseUrlMismatch(
            f"AMBER_PUBLIC_BASE_URL is {wanted} but this index's URI-Ms are under {existing} "
            "(recorded when it was first served; URI-Ms are permanent). Unset "
            f"AMBER_PUBLIC_BASE_URL to keep {existing}, or move every URI-M with: "
            f"amber config set-base-url {wanted}"
        )
    ignored = proposal if wanted is None and proposal not in (None, existing) else None
    return SettledBaseUrl(existing, recorded_now, ignored)


def move_base_url(recorded: RecordedSettings, new_base: str) -> tuple[str | None, str]:
    """Record ``new_base`` as the base of every URI-M from now on; return (old, new).

    Every URI-M handed out before names the old base: move only when that base will keep
    answering (a redirect, a DNS name that follows), or when nothing was handed out yet."""
    new = normalise_base_url(new_base)
    old = recorded.get(RECORD_NAME)
    recorded.replace(RECORD_NAME, new)
    return old, new
