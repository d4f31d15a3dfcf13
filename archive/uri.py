"""URI-Rs: validation and the lookup key that groups equivalent spellings of one resource.

The URI-R is stored exactly as given. The *lookup key* is what TimeGates and TimeMaps match
on. It applies only normalisations that RFC 3986 §6 (and RFC 9110 for http/https) say
preserve identity, plus query-parameter order:

- scheme and host lower-cased, host IDNA-encoded; default port removed; empty path → ``/``;
- percent-encoding: hex digits upper-cased, unreserved characters decoded, characters
  that must be encoded (non-ASCII, space-like and unsafe ASCII) encoded as UTF-8;
- dot segments removed from the path;
- query parameters sorted by name (stable, so repeated names keep their order);
- the fragment dropped (it never reaches the server), and an empty query (``?``).

Characters that are never legal in a URI and dangerous where URIs are echoed (``<``,
``>``, ``"``, ``\\``, controls, lone surrogates) are refused outright; a trailing dot in
the host is dropped (``example.com.`` is ``example.com``).

It never merges distinct resources: ``www.`` and trailing slashes are kept, ``%2F`` stays
``%2F`` (it is not ``/``), and case in path and query is preserved.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from archive.exceptions import InvalidURI

MAX_URI_LENGTH = 8192
WEB_SCHEMES = ("http", "https")
KEY_VERSION = 1  # bump when the lookup key rules change (keys are stored)

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
_FORBIDDEN = re.compile(r"[\x00-\x20\x7f<>\"\\^`{|}]")
# Controls (C0, DEL, C1), whitespace as str.isspace() has it (\s is the same test), and
# lone surrogates: searched by the regex engine, not character by character in Python.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\\s\ud800-\udfff]")
_REFUSED = re.compile(r'[<>"\\]')
_PCT = re.compile(r"%([0-9A-Fa-f]{2})")
_BAD_PCT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_INTERNAL_KEEP = "/?#[]@!$&'()*+,;=:"


@dataclass(frozen=True)
class URIR:
    """A validated URI-R: ``raw`` as given, ``key`` for lookups, ``scheme`` lower-cased."""

    raw: str
    key: str
    scheme: str

    @property
    def is_web(self) -> bool:
        return self.scheme in WEB_SCHEMES


def parse_uri_r(raw: str, internal_schemes: Iterable[str] = ("kb",)) -> URIR:
    """Validate ``raw`` and compute its lookup key; raise :class:`InvalidURI` otherwise."""
    if not isinstance(raw, str) or not raw:
        raise InvalidURI("URI-R is empty")
    schemes = internal_schemes if isinstance(internal_schemes, tuple) else tuple(internal_schemes)
    if len(raw) <= _MEMO_LENGTH:
        return _parse_memoised(raw, schemes)
    return _parse(raw, schemes)


# Agents cite the same sources again and again, and every write, TimeGate and TimeMap
# request parses its URI-R: remembered parses of short URI-Rs (a failed parse raises
# again, it is never remembered) save most of that work, in bounded memory.
_MEMO_LENGTH = 1024
_MEMO_ENTRIES = 4096


def _parse(raw: str, internal_schemes: tuple[str, ...]) -> URIR:
    if len(raw) > MAX_URI_LENGTH:
        raise InvalidURI(f"URI-R is longer than {MAX_URI_LENGTH} characters")
    if _UNPRINTABLE.search(raw):
        raise InvalidURI("URI-R contains whitespace or control characters")
    if _REFUSED.search(raw):
        # Never legal in a URI and dangerous wherever a URI is echoed (headers, HTML).
        raise InvalidURI("URI-R contains '<', '>', '\"' or '\\'")
    scheme, sep, rest = raw.partition(":")
    if not sep or not _SCHEME.fullmatch(scheme):
        raise InvalidURI("URI-R must be absolute (scheme:…)")
    scheme = scheme.lower()
    if _BAD_PCT.search(rest):
        raise InvalidURI("URI-R has a malformed percent-escape")
    if scheme in WEB_SCHEMES:
        key = _web_key(scheme, rest)
    elif scheme in {s.lower() for s in internal_schemes}:
        if not rest:
            raise InvalidURI(f"{scheme}: URI-R has nothing after the scheme")
        key = f"{scheme}:{_normalise_escapes(rest, keep=_INTERNAL_KEEP)}"
    else:
        raise InvalidURI(f"URI-R scheme {scheme!r} is not allowed")
    return URIR(raw=raw, key=key, scheme=scheme)


_parse_memoised = functools.lru_cache(maxsize=_MEMO_ENTRIES)(_parse)


def to_ascii_uri(uri: str) -> str:
    """Percent-encode anything that may not appear literally in a URI (for headers/links).

    The result never contains CR, LF, space, ``<``, ``>``, ``"`` or ``,``-breaking
    characters beyond what RFC 3986 allows, so it is safe inside ``<…>`` in a Link header.
    """
    if uri.isascii() and not _FORBIDDEN.search(uri):
        return uri  # the common case, on every response: nothing to encode
    return "".join(_encode_char(ch) if _needs_encoding(ch) else ch for ch in uri)


def _web_key(scheme: str, rest: str) -> str:
    if not rest.startswith("//"):
        raise InvalidURI("http(s) URI-R must have an authority (scheme://host/…)")
    authority, path, query = _split_hierarchical(rest[2:])
    host, port = _parse_authority(authority)
    port_part = "" if port is None or port == _DEFAULT_PORTS[scheme] else f":{port}"
    path = _remove_dot_segments(_normalise_escapes(path or "/", keep="/:@!$&'()*+,;="))
    key = f"{scheme}://{host}{port_part}{path}"
    # An empty query ("…/search?") cannot travel in a TimeGate path (the server sees no
    # query either way), so for lookups it is the same resource as no query at all.
    normalised_query = _sorted_query(query) if query else ""
    if normalised_query:
        key += "?" + normalised_query
    return key


def _split_hierarchical(rest: str) -> tuple[str, str, str | None]:
    rest = rest.split("#", 1)[0]
    rest, qmark, query = rest.partition("?")
    slash = rest.find("/")
    authority, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    return authority, path, (query if qmark else None)


def _parse_authority(authority: str) -> tuple[str, int | None]:
    if "@" in authority:
        # Credentials in a URI-R would leak secrets into TimeMaps and logs.
        raise InvalidURI("URI-R must not contain user information")
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise InvalidURI("URI-R has an unterminated IPv6 literal")
        host, port_text = authority[: end + 1].lower(), authority[end + 1 :]
        try:
            host = f"[{ipaddress.IPv6Address(host[1:-1]).compressed}]"
        except ValueError:
            raise InvalidURI("URI-R has an invalid IPv6 literal") from None
        if port_text and not port_text.startswith(":"):
            raise InvalidURI("URI-R has garbage after the IPv6 literal")
        port_text = port_text[1:]
    else:
        host, _, port_text = authority.partition(":")
        host = _idna_host(host)
    if not host or host == "[]":
        raise InvalidURI("URI-R has no host")
    if port_text == "":
        return host, None
    if not re.fullmatch(r"[0-9]{1,5}", port_text) or not 0 < int(port_text) < 65536:
        raise InvalidURI("URI-R has an invalid port")
    return host, int(port_text)


_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_\-]{0,61}[a-z0-9_])?")
_IPV4 = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")


def _idna_host(host: str) -> str:
    host = _PCT.sub(
        lambda m: chr(int(m.group(1), 16)) if int(m.group(1), 16) < 0x80 else m.group(0), host
    )
    host = host[:-1] if host.endswith(".") else host  # the root label is implied
    if not host:
        return host
    if _IPV4.fullmatch(host):
        if any(int(octet) > 255 for octet in host.split(".")):
            raise InvalidURI("URI-R host is not a valid IPv4 address")
        return host
    try:
        labels = [
            label.lower() if label.isascii() else label.encode("idna").decode("ascii")
            for label in host.split(".")
        ]
    except UnicodeError as exc:
        raise InvalidURI("URI-R host is not a valid internationalised domain name") from exc
    for label in labels:
        _check_label(label)
    result = ".".join(labels)
    if len(result) > 253:
        raise InvalidURI("URI-R host name is longer than 253 characters")
    return result


def _check_label(label: str) -> None:
    if not _LABEL.fullmatch(label):
        raise InvalidURI("URI-R host has an empty, over-long or malformed label")
    if label.startswith("xn--"):
        try:
            label.encode("ascii").decode("idna")
        except UnicodeError as exc:
            raise InvalidURI("URI-R host has an invalid punycode (xn--) label") from exc


def _normalise_escapes(text: str, *, keep: str) -> str:
    """Upper-case escapes, decode unreserved ones, encode what must be encoded."""

    def fix(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in _UNRESERVED else "%" + match.group(1).upper()

    out = []
    for piece in re.split(r"(%[0-9A-Fa-f]{2})", text):
        if _PCT.fullmatch(piece):
            out.append(fix(_PCT.fullmatch(piece)))  # type: ignore[arg-type]
        else:
            out.append(
                "".join(ch if ch in _UNRESERVED or ch in keep else _encode_char(ch) for ch in piece)
            )
    return "".join(out)


def _sorted_query(query: str) -> str:
    params = [_normalise_escapes(p, keep="/?:@!$'()*+,;=") for p in query.split("&") if p != ""]
    return "&".join(sorted(params, key=lambda p: p.partition("=")[0]))


def _remove_dot_segments(path: str) -> str:
    if "." not in path:
        return path
    output: list[str] = []
    segments = path.split("/")
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == ".":
            if last:
                output.append("")
        elif segment == "..":
            if len(output) > 1:
                output.pop()
            if last:
                output.append("")
        else:
            output.append(segment)
    result = "/".join(output)
    return result if result.startswith("/") else "/" + result


def _needs_encoding(ch: str) -> bool:
    return not ch.isascii() or bool(_FORBIDDEN.fullmatch(ch))


def _encode_char(ch: str) -> str:
    # surrogatepass: a lone surrogate (refused as a URI-R, but possible elsewhere) must not
    # crash a response that echoes it.
    return "".join(f"%{byte:02X}" for byte in ch.encode("utf-8", "surrogatepass"))
