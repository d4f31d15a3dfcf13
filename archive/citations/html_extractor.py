"""The ``amber-html`` extractor: all visible text of an HTML document, laid out like
``innerText``.

Every element that is rendered contributes its text, with no boilerplate removal
(navigation, sidebars, tables and captions count); elements never rendered (``head``,
``script``, ``style``, ``template``…) and attributes do not. Inline elements join with no
separator, blocks are separated by a line break, table cells by a tab, and whitespace
collapses outside ``pre``-like elements. The full rules are in ``docs/specs/extractors.md``;
any change to what this produces must bump the HTML rules number in
:mod:`archive.citations.extract`.
"""

from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser, LexborNode

from archive.citations.charsets import decode_html

# Never rendered: their text is not visible text.
_SKIP_TAGS = (
    "head",
    "title",
    "script",
    "style",
    "noscript",
    "template",
    "iframe",
    "canvas",
    "datalist",
    "desc",
    "meta",
    "link",
    "base",
    "noframes",
    "noembed",
    "rp",
    "param",
    "video",
    "audio",
)
# Block-level boxes (CSS display other than inline in the HTML UA stylesheet).
_BLOCK_TAGS = (
    "address",
    "article",
    "aside",
    "blockquote",
    "body",
    "caption",
    "center",
    "dd",
    "details",
    "dialog",
    "dir",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "frame",
    "frameset",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hgroup",
    "hr",
    "html",
    "legend",
    "li",
    "listing",
    "main",
    "menu",
    "nav",
    "ol",
    "optgroup",
    "option",
    "p",
    "plaintext",
    "pre",
    "search",
    "section",
    "summary",
    "table",
    "tbody",
    "tfoot",
    "thead",
    "tr",
    "ul",
    "xmp",
)
_CELL_TAGS = ("td", "th")
_VERBATIM_TAGS = ("pre", "textarea", "listing", "xmp", "plaintext")

# Lexbor's static tag ids (the walk compares ints, not names). Element types Lexbor does
# not know get large per-document ids and are treated as inline.
_STATIC_TAG_LIMIT = 1 << 16
_TEXT_ID = 2  # LXB_TAG__TEXT


def _tag_ids(*names: str) -> frozenset[int]:
    parser = LexborHTMLParser("")
    ids = frozenset(parser.create_node(name).tag_id for name in names)
    if not all(_TEXT_ID < tag_id < _STATIC_TAG_LIMIT for tag_id in ids):
        raise RuntimeError("Lexbor's tag ids are not what amber-html expects")
    return ids


_BR_ID = next(iter(_tag_ids("br")))
_SKIP_IDS = _tag_ids(*_SKIP_TAGS)
_BLOCK_IDS = _tag_ids(*_BLOCK_TAGS)
_CELL_IDS = _tag_ids(*_CELL_TAGS)
_VERBATIM_IDS = _tag_ids(*_VERBATIM_TAGS)
_ELEMENT_IDS_FROM = next(iter(_tag_ids("a")))  # below: text, comment, document, doctype…

# What the walk does with an element, as bit flags in one lookup (absent: inline).
_K_BLOCK, _K_CELL, _K_VERBATIM, _K_BREAK, _K_LEAF = 1, 2, 4, 8, 16
_KINDS: dict[int, int] = {}
for _ids, _flag in (
    (_BLOCK_IDS, _K_BLOCK),
    (_CELL_IDS, _K_CELL),
    (_VERBATIM_IDS, _K_VERBATIM),
    (_SKIP_IDS, _K_LEAF),
    (frozenset({_BR_ID}), _K_BREAK | _K_LEAF),
):
    for _id in _ids:
        _KINDS[_id] = _KINDS.get(_id, 0) | _flag

# Collapsible whitespace: HTML's ASCII whitespace plus VT and the C0 separators FS..US, i.e.
# exactly what ``str.split()`` splits ASCII text on (the fast path below relies on that).
_COLLAPSIBLE = re.compile(r"[ \t\n\x0b\x0c\r\x1c-\x1f]+")

# Separators owed between two pieces of text; the strongest wins.
_SEPARATORS = ("", " ", "\t", "\n")
_SPACE, _CELL_BREAK, _LINE = 1, 2, 3


def html_text(content: bytes, charset: str | None = None) -> str:
    return html_to_text(decode_html(content, charset))


def html_to_text(markup: str) -> str:
    """The visible text of decoded HTML (rules in ``docs/specs/extractors.md``)."""
    if "\x00" in markup:
        markup = markup.replace("\x00", "")  # the parser drops or replaces them anyway
    root = LexborHTMLParser(markup).root
    out: list[str] = []
    append = out.append
    pending = 0  # the separator owed before the next text (an index into _SEPARATORS)
    breaks = 0  # <br>s since the last text
    verbatim = 0  # depth inside pre-like elements
    kinds = _KINDS
    first_element = _ELEMENT_IDS_FROM
    stack: list[LexborNode] = []
    open_kinds: list[int] = []
    node: LexborNode | None = root
    while True:
        while node is None:
            if not stack:
                return "".join(out)
            kind = open_kinds.pop()
            if kind:
                if kind & _K_BLOCK:
                    pending = _LINE
                elif kind & _K_CELL and pending < _CELL_BREAK:
                    pending = _CELL_BREAK
                if kind & _K_VERBATIM:
                    verbatim -= 1
            node = stack.pop().next
        tag = node.tag_id
        if tag == _TEXT_ID:
            value = node.text_content
            node = node.next
            if not value:
                continue
            if verbatim:
                body = value
                trailing = False
            else:
                if value.isascii():
                    body = " ".join(value.split())
                else:
                    body = _COLLAPSIBLE.sub(" ", value).strip(" ")
                if not body:  # whitespace only
                    if pending < _SPACE:
                        pending = _SPACE
                    continue
                if value[0] != body[0] and pending < _SPACE:
                    pending = _SPACE
                trailing = value[-1] != body[-1]
            if out:
                if breaks:
                    append("\n" * breaks)
                elif pending:
                    append(_SEPARATORS[pending])
            append(body)
            breaks = 0
            pending = _SPACE if trailing else 0
            continue
        kind = kinds.get(tag, 0)
        if kind & _K_LEAF or tag < first_element:  # skipped subtree, <br>, comment, doctype
            if kind & _K_BREAK:
                breaks += 1
                pending = 0
            node = node.next
            continue
        if kind:
            if kind & _K_BLOCK:
                pending = _LINE
            elif kind & _K_CELL and pending < _CELL_BREAK:
                pending = _CELL_BREAK
            if kind & _K_VERBATIM:
                verbatim += 1
        stack.append(node)
        open_kinds.append(kind)
        node = node.child
