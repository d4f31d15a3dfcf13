"""archive.citations.extract: the named, versioned extractors quotes are matched against."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pdf_builder import build_pdf, text_stream

from archive.citations import (
    HTML_EXTRACTOR,
    HTML_EXTRACTOR_VERSION,
    PDF_EXTRACTOR,
    PDF_EXTRACTOR_VERSION,
    PDF_PAGE_SEPARATOR,
    PLAIN_EXTRACTOR,
    PLAIN_EXTRACTOR_VERSION,
    ExtractedText,
    extract_text,
    html_to_text,
    locate,
)
from archive.citations import extract as text_module
from archive.exceptions import InvalidContent, InvalidInput
from archive.hashing import content_address

FAST = settings(max_examples=150, deadline=None, database=None)


def html(markup: str) -> str:
    return extract_text(markup.encode("utf-8"), "text/html; charset=utf-8").text


# -- a minimal hand-written PDF (no test dependency) ------------------------------------------

TOUNICODE_FI = b"""/CIDInit /ProcSet findresource begin
12 dict begin
begincmap
/CMapName /Adobe-Identity-UCS def
/CMapType 2 def
1 begincodespacerange
<00> <FF>
endcodespacerange
1 beginbfchar
<01> <FB01>
endbfchar
endcmap
CMapName currentdict /CMapResource defineresource pop
end
end"""


def make_pdf(pages: list[list[bytes]], *, to_unicode: bytes | None = None) -> bytes:
    """A valid PDF 1.4 with one Helvetica text line per item (WinAnsi bytes)."""
    return build_pdf(
        [(text_stream(lines, leading=14), False) for lines in pages], to_unicode=to_unicode
    )


# -- dispatch and records ---------------------------------------------------------------------


def test_extractors_are_named_and_versioned() -> None:
    assert HTML_EXTRACTOR == "amber-html" and HTML_EXTRACTOR_VERSION.startswith("3+lexbor-")
    assert PDF_EXTRACTOR == "amber-pdf" and PDF_EXTRACTOR_VERSION.startswith("1+pdfium-")
    assert PLAIN_EXTRACTOR == "amber-plain" and PLAIN_EXTRACTOR_VERSION == "2"
    assert extract_text(b"<p>x</p>", "text/html") == ExtractedText(
        "x", HTML_EXTRACTOR, HTML_EXTRACTOR_VERSION
    )
    assert extract_text(b"x", "text/plain") == ExtractedText(
        "x", PLAIN_EXTRACTOR, PLAIN_EXTRACTOR_VERSION
    )


@pytest.mark.parametrize(
    ("media_type", "extractor"),
    [
        ("text/html", HTML_EXTRACTOR),
        ("TEXT/HTML; Charset=UTF-8", HTML_EXTRACTOR),
        ("application/xhtml+xml", HTML_EXTRACTOR),
        ("text/plain", PLAIN_EXTRACTOR),
        ("text/markdown; charset=utf-8", PLAIN_EXTRACTOR),
        ("text/csv", PLAIN_EXTRACTOR),
        ("text/x-rst", PLAIN_EXTRACTOR),
        ("application/json", PLAIN_EXTRACTOR),
        ("application/ld+json", PLAIN_EXTRACTOR),
        ("application/xml", PLAIN_EXTRACTOR),
    ],
)
def test_dispatch_on_media_type(media_type: str, extractor: str) -> None:
    assert extract_text(b"<p>hello</p>", media_type).extractor == extractor


@pytest.mark.parametrize(
    "media_type", ["image/png", "application/octet-stream", "application/zip", "video/mp4", ""]
)
def test_unknown_and_binary_types_refused(media_type: str) -> None:
    with pytest.raises(InvalidContent, match="cannot extract text from"):
        extract_text(b"\x89PNG\r\n\x1a\n", media_type)


def test_errors_are_invalid_input() -> None:
    assert issubclass(InvalidContent, InvalidInput)


# -- HTML ---------------------------------------------------------------------------------------


def test_inline_markup_joins_without_separator() -> None:
    assert html("<p>Hello <b>big</b> world</p>") == "Hello big world"
    assert html(
        "<p>un<i>believ</i>able <a href='#'>link</a>, <span>x</span><em>y</em><code>z</code></p>"
    ) == ("unbelievable link, xyz")


def test_blocks_are_separated_by_line_breaks() -> None:
    assert html(
        "<h1>Title</h1><p>One</p><div>Two</div><ul><li>a<li>b</ul><blockquote>q</blockquote>"
    ) == ("Title\nOne\nTwo\na\nb\nq")
    assert html("a<br>b<br><br>c") == "a\nb\n\nc"
    assert html("<p>a</p>\n\n   <p>b</p>") == "a\nb"


def test_whitespace_collapses_like_a_browser() -> None:
    assert html("<p>  lots \n\t of   space  </p>") == "lots of space"
    assert html("<p>x <b> </b> y</p>") == "x y"
    assert html("<p>x<b> y</b></p>") == "x y"


def test_pre_is_verbatim() -> None:
    assert html("<p>before</p><pre>  a\n    b</pre><p>after</p>") == "before\n  a\n    b\nafter"


def test_tables_captions_sidebars_nav_footer_are_text() -> None:
    page = """<html><head><title>Page title</title><meta name=x content=y></head><body>
      <nav><ul><li><a href=/>Home</a></li><li><a href=/about>About us</a></li></ul></nav>
      <aside class=sidebar><h3>Related</h3><p>Sidebar note</p></aside>
      <main><table><caption>Quarterly figures</caption>
        <tr><th>Quarter</th><th>Revenue</th></tr>
        <tr><td>Q1</td><td>1,200</td></tr></table>
      <figure><img src=a.png alt="an alt text"><figcaption>Figure 1: the chart</figcaption></figure></main>
      <footer><p>© 2024 Example Corp</p></footer></body></html>"""
    text = html(page)
    assert text == (
        "Home\nAbout us\nRelated\nSidebar note\nQuarterly figures\nQuarter\tRevenue\nQ1\t1,200\n"
        "Figure 1: the chart\n© 2024 Example Corp"
    )
    for quote in [
        "About us",
        "Sidebar note",
        "Quarterly figures",
        "Q1 1,200",
        "Figure 1: the chart",
        "Example Corp",
    ]:
        assert locate(text, quote).exact.replace("\t", " ") == quote


def test_cells_do_not_fuse() -> None:
    assert (
        html("<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>")
        == "a\tb\nc\td"
    )


def test_invisible_elements_and_attributes_are_not_text() -> None:
    text = html(
        "<head><title>T</title><style>p{}</style></head><body><script>var s = '<p>no</p>';</script>"
        "<style>.x{color:red}</style><noscript>enable js</noscript><template><p>tpl</p></template>"
        "<!-- comment --><p title='attr' aria-label='label'>yes<img alt='alt'></p>"
        "<svg><title>svg title</title><text>svg text</text></svg><title>late title</title></body>"
    )
    assert text == "yes\nsvg text"


def test_fallback_content_a_browser_does_not_show_is_not_text() -> None:
    """Hidden by the HTML UA stylesheet (noframes, noembed, rp, param) or never shown by a
    browser that plays the media (video, audio); an object's fallback is shown whenever the
    object cannot be, so it stays."""
    text = html(
        "<p>Visible.</p><noframes>no frames</noframes><noembed>no embed</noembed>"
        "<ruby>漢<rp>(</rp><rt>kan</rt><rp>)</rp></ruby>"
        "<video src='v.mp4'>Your browser cannot play video</video>"
        "<audio src='a.mp3'><source src='a.ogg'>No audio</audio>"
        "<object data='x.svg'><param name='p' value='v'>Object fallback</object>"
    )
    assert text == "Visible.\n漢kanObject fallback"


def test_entities_decoded_nbsp_kept() -> None:
    assert (
        html("<p>a&nbsp;b &amp; c &lt;d&gt; &#8220;q&#x201D; &eacute;</p>")
        == "a\u00a0b & c <d> \u201cq\u201d \u00e9"
    )


def test_deterministic() -> None:
    page = (
        "<div><p>Some <b>text</b> here</p><table><tr><td>1</td></tr></table></div>" * 200
    ).encode()
    text_module.clear_cache()
    first = extract_text(page, "text/html")
    text_module.clear_cache()
    assert extract_text(page, "text/html") == first
    assert html_to_text(page.decode()) == first.text


@given(
    st.text(alphabet=st.sampled_from(list("ab <>/&;#pdivbrspan\n\t\u00a0\u00e9'\"=")), max_size=200)
)
@FAST
def test_any_markup_extracts_deterministically(markup: str) -> None:
    first = html_to_text(markup)
    assert html_to_text(markup) == first
    assert "\x00" not in first


def test_deep_nesting_does_not_recurse() -> None:
    markup = "<div>" * 5000 + "deep" + "</div>" * 5000
    assert html_to_text(markup) == "deep"


# -- HTML charsets ---------------------------------------------------------------------------------


def test_charset_parameter_respected() -> None:
    body = "<p>caf\u00e9 \u20ac</p>".encode("cp1252")
    assert extract_text(body, "text/html; charset=windows-1252").text == "caf\u00e9 \u20ac"
    # browsers read latin1 labels as windows-1252 (WHATWG Encoding)
    assert extract_text(body, "text/html; charset=ISO-8859-1").text == "caf\u00e9 \u20ac"


def test_meta_charset_sniffed() -> None:
    body = '<html><head><meta charset="iso-8859-15"></head><body><p>caf\u00e9 \u20ac</p></body></html>'.encode(
        "iso-8859-15"
    )
    assert extract_text(body, "text/html").text == "caf\u00e9 \u20ac"
    body = (
        '<meta http-equiv="Content-Type" content="text/html; charset=shift_jis"><p>\u65e5\u672c</p>'
    ).encode("shift_jis")
    assert extract_text(body, "text/html").text == "\u65e5\u672c"


def test_bom_wins() -> None:
    body = "\ufeff<p>\u00e9</p>".encode("utf-16-le")
    assert extract_text(body, "text/html; charset=iso-8859-1").text == "\u00e9"
    assert extract_text(b"\xef\xbb\xbf<p>\xc3\xa9</p>", "text/html").text == "\u00e9"


def test_html_defaults_to_utf8_with_replacement() -> None:
    assert extract_text("<p>\u00e9</p>".encode(), "text/html").text == "\u00e9"
    assert extract_text(b"<p>a\xffb</p>", "text/html").text == "a\ufffdb"
    assert extract_text(b"<p>a\x00b</p>", "text/html").text == "ab"


@pytest.mark.parametrize(
    "label", ["idna", "punycode", "unicode_escape", "raw_unicode_escape", "utf-7"]
)
def test_html_ignores_labels_that_are_not_character_encodings(label: str) -> None:
    """Python decodes these, but they transform text: a page declaring one must neither
    crash the extractor nor make text quotable that a browser shows differently."""
    body = b"<p>The caf\\u00e9 +ADI-0 \xe9</p>"
    expected = "The caf\\u00e9 +ADI-0 \ufffd"  # read as UTF-8, like an unknown label
    assert extract_text(body, f"text/html; charset={label}").text == expected
    assert extract_text(f'<meta charset="{label}">'.encode() + body, "text/html").text == expected


@pytest.mark.parametrize("label", ["idna", "punycode", "unicode_escape", "utf-7", "zlib", "base64"])
def test_plain_text_refuses_labels_that_are_not_character_encodings(label: str) -> None:
    with pytest.raises(InvalidContent, match="unknown charset"):
        extract_text(b"The caf\\u00e9 is open", f"text/plain; charset={label}")


# -- plain text --------------------------------------------------------------------------------


def test_plain_text_verbatim() -> None:
    body = "# Title\n\n  indented *markdown*\r\n<b>not html</b>"
    assert extract_text(body.encode(), "text/markdown").text == body


def test_plain_text_charset_and_bom() -> None:
    assert (
        extract_text("caf\u00e9".encode("latin-1"), "text/plain; charset=latin-1").text
        == "caf\u00e9"
    )
    assert extract_text(b"\xef\xbb\xbfhello", "text/plain").text == "hello"
    assert extract_text("h\u00e9".encode("utf-16"), "text/plain; charset=utf-16").text == "h\u00e9"


@pytest.mark.parametrize(
    ("body", "media_type", "charset"),
    [
        (b"caf\xe9", "text/plain", "utf-8"),
        (b"caf\xe9", "text/plain; charset=utf-8", "utf-8"),
        (b"\xff\xfe\x00", "text/csv; charset=UTF-8", "UTF-8"),
        (b"caf\xc3\xa9", "text/plain; charset=us-ascii", "us-ascii"),
        (b'{"a": "\xe9"}', "application/json", "utf-8"),
    ],
)
def test_non_utf8_text_declared_as_text_refused(body: bytes, media_type: str, charset: str) -> None:
    with pytest.raises(InvalidContent, match=f"text content is not valid {charset}"):
        extract_text(body, media_type)


@pytest.mark.parametrize("charset", ["klingon", "zlib", "base64", "rot13", "hex"])
def test_unknown_or_non_text_charset_refused_for_text(charset: str) -> None:
    with pytest.raises(InvalidContent, match="unknown charset"):
        extract_text(b"eJzLSM3JyQcABiwCFQ==", f"text/plain; charset={charset}")


@pytest.mark.parametrize("charset", ["klingon", "zlib", "base64", "rot13"])
def test_unknown_or_non_text_charset_ignored_for_html(charset: str) -> None:
    assert extract_text(b"<p>caf\xc3\xa9</p>", f"text/html; charset={charset}").text == "caf\u00e9"
    body = b'<meta charset="%s"><p>caf\xc3\xa9</p>' % charset.encode()
    assert extract_text(body, "text/html").text == "caf\u00e9"


# -- cache ------------------------------------------------------------------------------------


def test_cache_reuses_and_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    text_module.clear_cache()
    calls = []
    real = text_module.html_text

    def counting(content: bytes, charset: str | None = None) -> str:
        calls.append(content)
        return real(content, charset)

    monkeypatch.setattr(text_module, "html_text", counting)
    body = b"<p>cached</p>"
    key = content_address(body)
    for _ in range(10):
        assert extract_text(body, "text/html", cache_key=key).text == "cached"
    assert len(calls) == 1
    extract_text(body, "text/html")  # hashed by the extractor: same key
    assert len(calls) == 1
    # a different charset is a different reading of the same bytes
    extract_text(body, "text/html; charset=windows-1252", cache_key=key)
    assert len(calls) == 2
    for n in range(text_module.CACHE_ENTRIES + 10):
        extract_text(b"<p>%d</p>" % n, "text/html")
    assert len(text_module._cache) <= text_module.CACHE_ENTRIES
    text_module.clear_cache()


def test_hundred_kib_page() -> None:
    paragraph = (
        "<p>The <a href='/x'>archive</a> keeps <b>evidence</b> of what the agent read &mdash; "
        "every \u201cquote\u201d is checked.</p>\n<table><tr><td>cell</td><td>42</td></tr></table>\n"
        "<script>track('x')</script>"
    )
    page = (
        "<html><body>" + paragraph * (100 * 1024 // len(paragraph) + 1) + "</body></html>"
    ).encode()
    assert len(page) >= 100 * 1024
    text = extract_text(page, "text/html").text
    assert "every \u201cquote\u201d is checked.\ncell\t42\nThe archive keeps" in text
    assert "track" not in text


# -- PDF -----------------------------------------------------------------------------------------


def test_pdf_text_and_pages() -> None:
    pdf = make_pdf([[b"Hello PDF world.", b"Second line here."], [b"Page two."]])
    extracted = extract_text(pdf, "application/pdf")
    assert extracted.extractor == PDF_EXTRACTOR
    assert extracted.extractor_version == PDF_EXTRACTOR_VERSION
    assert (
        extracted.text == "Hello PDF world.\nSecond line here." + PDF_PAGE_SEPARATOR + "Page two."
    )


def test_pdf_line_break_hyphenation_restored_and_matched() -> None:
    pdf = make_pdf([[b"The evi-", b"dence is clear and state-", b"of-the-art."]])
    extracted = extract_text(pdf, "application/pdf")
    assert extracted.text == "The evi-\ndence is clear and state-\nof-the-art."
    match = locate(extracted.text, "evidence is clear", pdf=True)
    assert match.exact == "evi-\ndence is clear"
    assert locate(extracted.text, "state-of-the-art", pdf=True).exact == "state-\nof-the-art"


def test_pdf_ligature_matched() -> None:
    pdf = make_pdf([[b"A \x01ne result."]], to_unicode=TOUNICODE_FI)
    text = extract_text(pdf, "application/pdf").text
    match = locate(text, "fine result", pdf=True)
    assert text[match.start : match.end] in ("\ufb01ne result", "fine result")


@pytest.mark.parametrize("body", [b"%PDF-1.4 not really", b"", b"hello", make_pdf([[b"x"]])[:200]])
def test_malformed_pdf_refused(body: bytes) -> None:
    with pytest.raises(InvalidContent, match="cannot read PDF"):
        extract_text(body, "application/pdf")
