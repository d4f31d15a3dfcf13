"""Where things live: every absolute URL the API hands out, under the public base URL.

The URI-R travels raw at the end of TimeGate and TimeMap paths, query string included.
TimeMap paging therefore goes in the path (``/timemap/json/page/2/<URI-R>``), never in the
query string, which belongs to the URI-R.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from starlette.requests import Request
from starlette.types import Scope

from archive.exceptions import InvalidURI
from archive.uri import to_ascii_uri

MEMENTO_PREFIX = "/memento/"
TIMEGATE_PREFIX = "/timegate/"
TIMEMAP_LINK_PREFIX = "/timemap/link/"
TIMEMAP_JSON_PREFIX = "/timemap/json/"
_PAGE = re.compile(r"page/([0-9]{1,9})/")
_COLLAPSED_SLASH = re.compile(r"^(https?):/(?!/)", re.IGNORECASE)


class Urls:
    def __init__(self, base: str) -> None:
        self.rebase(base)

    def rebase(self, base: str) -> None:
        """Mint under ``base`` from now on: the app learns the index's recorded base only
        once its archive is open, after the routes were given this object."""
        self.base = base.rstrip("/")
        # The base as it goes into Link headers. to_ascii_uri works character by character,
        # so an ASCII base followed by an ASCII URI-R is the ASCII form of the whole URL.
        self.ascii_base = to_ascii_uri(self.base)

    def memento(self, memento_id: str) -> str:
        return f"{self.base}{MEMENTO_PREFIX}{memento_id}"

    def timegate(self, uri_r: str) -> str:
        return f"{self.base}{TIMEGATE_PREFIX}{to_ascii_uri(uri_r)}"

    def timemap_link(self, uri_r: str, page: int = 1) -> str:
        return self._timemap(TIMEMAP_LINK_PREFIX, uri_r, page)

    def timemap_json(self, uri_r: str, page: int = 1) -> str:
        return self._timemap(TIMEMAP_JSON_PREFIX, uri_r, page)

    def _timemap(self, prefix: str, uri_r: str, page: int) -> str:
        paging = "" if page == 1 else f"page/{page}/"
        return f"{self.base}{prefix}{paging}{to_ascii_uri(uri_r)}"


def raw_uri_r(request: Request, prefix: str) -> tuple[str, int]:
    """:func:`raw_uri_r_of` a request."""
    return raw_uri_r_of(request.scope, prefix)


def raw_uri_r_of(scope: Scope, prefix: str) -> tuple[str, int]:
    """The URI-R exactly as the client sent it after ``prefix``, and the TimeMap page.

    Rebuilt from the raw path and query string: a decoded path parameter would turn
    ``%2F`` into ``/`` and drop the query. A fully percent-encoded URI-R
    (``https%3A%2F%2F…``) is decoded once; ``https:/host`` (a proxy merged the slashes) is
    repaired.
    """
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    try:
        path = raw_path.decode("ascii")
    except UnicodeDecodeError:
        path = raw_path.decode("utf-8", errors="strict") if _utf8(raw_path) else ""
        if not path:
            raise InvalidURI("URI-R in the path is not valid UTF-8") from None
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    rest = path[len(prefix) :] if path.startswith(prefix) else ""
    page = 1
    match = _PAGE.match(rest)
    if match:
        page = int(match.group(1))
        rest = rest[match.end() :]
        if page < 1:
            raise InvalidURI("TimeMap pages count from 1")
    if ":" not in rest.split("/", 1)[0] and ":" in unquote(rest).split("/", 1)[0]:
        rest = unquote(rest)
    rest = _COLLAPSED_SLASH.sub(lambda m: f"{m.group(1)}://", rest)
    query = scope.get("query_string", b"")
    if query:
        try:
            rest += "?" + query.decode("ascii")
        except UnicodeDecodeError:
            raise InvalidURI("query string of the URI-R is not ASCII") from None
    if not rest:
        raise InvalidURI("no URI-R after the path prefix")
    return rest, page


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
