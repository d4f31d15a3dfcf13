"""The JSON budget of a request: bounds on the shape of a JSON body, checked before it is
parsed, so that parsing and validating what passes is cheap whatever the body looks like.

Why a scan first: ``json.loads`` and schema validation run in C and Rust while holding the
GIL, and their cost grows with the number of values, not with the bytes. A 29 MB body of
2.5 million tiny members took seconds to parse and tens of seconds to validate, stalling
every other request of the process. :meth:`JsonBudget.check` counts the body's values in a
single pass that skips string contents at C speed (``bytes.find``), spends Python work only
per structural token, and stops at the first bound broken. What passes it has at most
``max_nodes`` values, ``max_depth`` levels, ``max_members`` members per object or array and
member names of at most ``max_key_bytes`` bytes, and costs little to parse and validate.

The scan counts; it does not judge grammar. A body it cannot make sense of (an unterminated
string, a stray bracket) is left to ``json.loads``, which refuses it as malformed.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from archive.config import Settings
from archive.exceptions import OverBudget

# The next token after optional whitespace: a structural character, a string's opening quote,
# or a run of anything else (a number or a literal such as true).
_TOKEN = re.compile(rb'[ \t\r\n]*([{}\[\],:"]|[^{}\[\],:" \t\r\n]+)')
_BACKSLASH = ord("\\")
# Strings longer than this (inline content) are decoded apart, in pieces of about
# _WINDOW_BYTES: json.loads holds the GIL for a whole call, and other requests wait for it.
LONG_STRING_BYTES = 1024 * 1024
_WINDOW_BYTES = 1024 * 1024
_NO_ESCAPE = re.compile(rb"[^\\]{12}")
_PATH_KEY_CHARS = 64  # a member name shown in an error's path is cut to this many characters
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class JsonBudget:
    """Bounds on one JSON body (settings ``AMBER_MAX_JSON_*``, docs/design.md §9.3)."""

    max_nodes: int = 20_000
    max_depth: int = 32
    max_members: int = 1_000
    max_key_bytes: int = 1_024

    @classmethod
    def of(cls, settings: Settings) -> JsonBudget:
        return cls(
            max_nodes=settings.max_json_nodes,
            max_depth=settings.max_json_depth,
            max_members=settings.max_json_members,
            max_key_bytes=settings.max_json_key_bytes,
        )

    def loads(self, raw: bytes) -> Any:
        """``raw`` parsed as ``json.loads`` parses it, once :meth:`check` has passed it.

        Raises :class:`OverBudget`, or what ``json.loads`` raises for a malformed body
        (``json.JSONDecodeError``, another ``ValueError`` for bytes that are not text).
        Strings over :data:`LONG_STRING_BYTES` (inline content) are decoded piece by piece,
        so that no single step holds the GIL for long (see :func:`_decode_long`).
        """
        text = _as_utf8(raw)
        if self.plainly_within(text):
            return json.loads(text)
        scan = _Scan(self, text)
        scan.run()
        if not scan.long_strings:
            return json.loads(text)
        return _loads_with_long_strings(text, scan.long_strings)

    def check(self, raw: bytes) -> None:
        """Raise :class:`OverBudget` at the first bound ``raw`` (UTF-8 JSON) breaks."""
        if not self.plainly_within(raw):
            _Scan(self, raw).run()

    def plainly_within(self, text: bytes) -> bool:
        """True when counts made at C speed prove that the scan would pass ``text`` (UTF-8)
        and find no long string in it; False when they do not (the scan then decides).

        Why: the scan spends Python work on every token, which for a small request (a
        memento write: a dozen tokens around one long string) costs three times its
        ``json.loads``. The proof, on the text split at its quotes (escapes neutralised,
        as the scan sees it): each value the scan counts is a string or takes at least one
        byte outside strings, so strings plus those bytes bound the values and the members
        of any container; the opening brackets bound the depth; and a string can only be a
        member name when the last structural byte before it is not ``:``, so the names
        are short when every string over the bound directly follows a ``:``."""
        if len(text) > LONG_STRING_BYTES:
            return False  # it may hold a long string, which the scan must find
        pieces = _neutralised(text).split(b'"')
        if len(pieces) % 2 == 0:
            return False  # an unterminated string: the scan leaves it to json.loads
        strings = pieces[1::2]
        outside = b"".join(pieces[0::2])
        if len(strings) + len(outside) > min(self.max_nodes, self.max_members):
            return False
        if outside.count(b"{") + outside.count(b"[") > self.max_depth:
            return False
        longer = self.max_key_bytes
        if max(map(len, strings), default=0) <= longer:
            return True
        return all(
            pieces[2 * number].rstrip(b" \t\r\n").endswith(b":")
            for number in [n for n, string in enumerate(strings) if len(string) > longer]
        )


def _as_utf8(raw: bytes) -> bytes:
    """The body as UTF-8, as ``json.loads`` reads bytes (it also accepts UTF-16 and -32)."""
    encoding = json.detect_encoding(raw)
    if encoding == "utf-8":
        return raw
    return raw.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")


def _neutralised(raw: bytes) -> bytes:
    """``raw`` with every escaped backslash and escaped quote replaced by two harmless
    bytes, so that each remaining ``"`` opens or closes a string. Replacing left to right
    pairs each run of backslashes as JSON does: ``\\\\\\"`` is an escaped backslash, then an
    escaped quote. Same length, so positions still point into ``raw``. Done a window at a
    time, each ending after a byte that is not a backslash, so no run is cut in two."""
    if b"\\" not in raw:
        return raw
    windows = []
    start = 0
    while start < len(raw):
        end = min(start + _WINDOW_BYTES, len(raw))
        while end < len(raw) and raw[end - 1] == _BACKSLASH:
            end += 1
        windows.append(raw[start:end].replace(b"\\\\", b"__").replace(b'\\"', b"__"))
        start = end
    return b"".join(windows)


def _loads_with_long_strings(text: bytes, spans: list[tuple[int, int]]) -> Any:
    """``json.loads(text)``, with the long strings at ``spans`` (their contents, between the
    quotes) parsed apart: the rest first, with a placeholder for each, then each string in
    pieces, then the placeholders replaced."""
    marker = f"amber-long-string-{uuid.uuid4().hex}-"
    pieces: list[bytes] = []
    strings: dict[str, str] = {}
    position = 0
    for number, (start, end) in enumerate(spans):
        name = f"{marker}{number}"
        pieces += [text[position:start], name.encode("ascii")]
        strings[name] = _decode_long(text, start, end)
        position = end
    pieces.append(text[position:])
    return _filled(json.loads(b"".join(pieces)), strings)


def _decode_long(text: bytes, start: int, end: int) -> str:
    """The JSON string whose contents are ``text[start:end]``, decoded a piece of about
    :data:`_WINDOW_BYTES` at a time. A piece ends where the 12 bytes before it hold no
    backslash (so no escape, nor a surrogate pair of escapes, is cut) and not inside a UTF-8
    sequence; where no such place is found, the piece runs on to the end."""
    parts: list[str] = []
    while start < end:
        cut = end
        if end - start > _WINDOW_BYTES:
            clean = _NO_ESCAPE.search(text, start + _WINDOW_BYTES, end)
            if clean is not None:
                cut = clean.end()
                while cut < end and 0x80 <= text[cut] < 0xC0:
                    cut += 1
        piece = text[start:cut].decode("utf-8", "surrogatepass")
        parts.append(json.loads('"' + piece + '"'))
        start = cut
    return "".join(parts)


def _filled(value: Any, strings: dict[str, str]) -> Any:
    """``value`` with each placeholder string replaced by its string (in place)."""
    if isinstance(value, str):
        return strings.get(value, value)
    if isinstance(value, list):
        for index, item in enumerate(value):
            value[index] = _filled(item, strings)
    elif isinstance(value, dict):
        for key, item in value.items():
            value[key] = _filled(item, strings)
    return value


@dataclass
class _Level:
    """One open object or array while scanning."""

    is_object: bool
    members: int = 0
    key: tuple[int, int] | None = None  # where the current member's name is, in raw
    expects_key: bool = False


@dataclass
class _Scan:
    budget: JsonBudget
    raw: bytes
    nodes: int = 0
    stack: list[_Level] = field(default_factory=list)
    long_strings: list[tuple[int, int]] = field(default_factory=list)  # values' contents

    def run(self) -> None:
        text = _neutralised(self.raw)
        match = _TOKEN.match
        find = text.find
        position = 0
        while (token := match(text, position)) is not None:
            kind = token.group(1)
            position = token.end()
            if kind == b'"':
                end = find(b'"', position)
                if end < 0:
                    return  # unterminated: json.loads refuses it
                self.string(position, end)
                position = end + 1
            elif kind == b"{" or kind == b"[":
                self.value()
                if len(self.stack) >= self.budget.max_depth:
                    raise self.over("max_json_depth", f"nested deeper than {self.budget.max_depth}")
                self.stack.append(_Level(is_object=kind == b"{", expects_key=kind == b"{"))
            elif kind == b"}" or kind == b"]":
                if not self.stack:
                    return  # a stray bracket: json.loads refuses it
                self.stack.pop()
            elif kind == b",":
                if self.stack and self.stack[-1].is_object:
                    self.stack[-1].expects_key = True
            elif kind == b":":
                if self.stack:
                    self.stack[-1].expects_key = False
            else:
                self.value()

    def string(self, start: int, end: int) -> None:
        level = self.stack[-1] if self.stack else None
        if level is not None and level.is_object and level.expects_key:
            level.key = (start, end)
            level.expects_key = False
            if end - start > self.budget.max_key_bytes:
                raise self.over(
                    "max_json_key_bytes",
                    f"has a member name longer than {self.budget.max_key_bytes} bytes",
                )
            return
        self.value()
        if end - start > LONG_STRING_BYTES:
            self.long_strings.append((start, end))

    def value(self) -> None:
        """Count one value (a node) in the current container."""
        level = self.stack[-1] if self.stack else None
        if level is not None:
            level.members += 1
        self.nodes += 1
        if self.nodes > self.budget.max_nodes:
            raise self.over("max_json_nodes", f"has more than {self.budget.max_nodes} values")
        if level is not None and level.members > self.budget.max_members:
            self.stack.pop()  # the path names the container, not the member
            what = "members" if level.is_object else "items"
            raise self.over(
                "max_json_members",
                f"has an {_kind(level)} of more than {self.budget.max_members} {what}",
            )

    def over(self, limit: str, what: str) -> OverBudget:
        path = self.path()
        maximum: int = getattr(self.budget, limit.replace("_json", ""))
        return OverBudget(
            f"request body {what} (at {path}; setting AMBER_{limit.upper()})",
            limit=limit,
            setting=f"AMBER_{limit.upper()}",
            max=maximum,
            path=path,
        )

    def path(self) -> str:
        """Where the scan is, as a JSONPath: ``$.citations[3].quote``."""
        parts = ["$"]
        for level in self.stack:
            if level.is_object:
                if level.key is not None:
                    parts.append(_member(self.raw[level.key[0] : level.key[1]]))
            else:
                parts.append(f"[{max(level.members - 1, 0)}]")
        return "".join(parts)


def _kind(level: _Level) -> str:
    return "object" if level.is_object else "array"


def _member(raw_name: bytes) -> str:
    raw_name = raw_name[: _PATH_KEY_CHARS * 6]  # enough for 64 escaped characters
    try:
        name = json.loads(b'"' + raw_name + b'"')
    except ValueError:
        name = raw_name.decode("utf-8", "replace")
    name = str(name)[:_PATH_KEY_CHARS]
    if _IDENTIFIER.fullmatch(name):
        return "." + name
    return "[" + json.dumps(name) + "]"
