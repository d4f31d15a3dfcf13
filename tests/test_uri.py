"""archive.uri: URI-R validation, the lookup key, and to_ascii_uri."""

from __future__ import annotations

import re
import urllib.parse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archive.exceptions import InvalidURI
from archive.uri import MAX_URI_LENGTH, URIR, parse_uri_r, to_ascii_uri

FAST = settings(max_examples=200, deadline=None, database=None)
COMPOSITE = settings(max_examples=120, deadline=None, database=None)


def key(raw: str, **kwargs: object) -> str:
    return parse_uri_r(raw, **kwargs).key  # type: ignore[arg-type]


# --------------------------------------------------------------------------- basic shape


def test_parse_keeps_raw_and_lowercases_scheme() -> None:
    raw = "HTTPS://Example.COM/Path?B=2&a=1#Frag"
    uri = parse_uri_r(raw)
    assert isinstance(uri, URIR)
    assert uri.raw == raw
    assert uri.scheme == "https"
    assert uri.key == "https://example.com/Path?B=2&a=1"
    assert uri.is_web


def test_internal_scheme_is_not_web() -> None:
    uri = parse_uri_r("kb:handbook/chapter-1")
    assert uri.scheme == "kb"
    assert uri.key == "kb:handbook/chapter-1"
    assert not uri.is_web


def test_custom_internal_schemes() -> None:
    assert key("notes:abc", internal_schemes=("notes",)) == "notes:abc"
    assert key("NOTES:abc", internal_schemes=("Notes",)) == "notes:abc"
    # Replacing the default list removes 'kb'.
    with pytest.raises(InvalidURI):
        parse_uri_r("kb:abc", internal_schemes=("notes",))
    with pytest.raises(InvalidURI):
        parse_uri_r("kb:abc", internal_schemes=())
    # Web schemes stay allowed whatever the internal list says.
    assert key("http://example.com", internal_schemes=()) == "http://example.com/"


def test_max_length_is_inclusive() -> None:
    prefix = "http://example.com/"
    exact = prefix + "a" * (MAX_URI_LENGTH - len(prefix))
    assert len(exact) == MAX_URI_LENGTH
    assert parse_uri_r(exact).key == exact
    with pytest.raises(InvalidURI):
        parse_uri_r(exact + "a")


# --------------------------------------------------------------------------- key: exact values

EXACT_KEYS = [
    ("http://example.com", "http://example.com/"),
    ("HTTP://EXAMPLE.COM:80", "http://example.com/"),
    ("https://example.com:443/x", "https://example.com/x"),
    ("http://example.com:8080/x", "http://example.com:8080/x"),
    ("http://example.com:443/", "http://example.com:443/"),
    ("http://example.com/%7e%41", "http://example.com/~A"),
    ("http://example.com/a%2fb", "http://example.com/a%2Fb"),
    ("http://example.com/caf\u00e9", "http://example.com/caf%C3%A9"),
    ("http://example.com/{x}|^`", "http://example.com/%7Bx%7D%7C%5E%60"),
    ("http://example.com/[a]?q=[b]", "http://example.com/%5Ba%5D?q=%5Bb%5D"),
    ("http://[0:0:0:0:0:0:0:1]/", "http://[::1]/"),
    ("http://Example.COM./", "http://example.com/"),
    ("http://1.2.3.4:80/", "http://1.2.3.4/"),
    ("http://example.com/a/./b/../c", "http://example.com/a/c"),
    ("http://example.com/a/b/..", "http://example.com/a/"),
    ("http://example.com/..", "http://example.com/"),
    ("http://example.com/?b=2&a=1", "http://example.com/?a=1&b=2"),
    ("http://example.com/?b=1&a=2&b=0", "http://example.com/?a=2&b=1&b=0"),
    ("http://example.com/p?q=1#frag", "http://example.com/p?q=1"),
    ("http://example.com?q=1", "http://example.com/?q=1"),
    ("http://b\u00fccher.de/", "http://xn--bcher-kva.de/"),
    ("http://[FE80::1]:80/", "http://[fe80::1]/"),
    ("KB:Doc/%7e%2f", "kb:Doc/~%2F"),
]


@pytest.mark.parametrize(("raw", "expected"), EXACT_KEYS)
def test_exact_key(raw: str, expected: str) -> None:
    assert key(raw) == expected


# --------------------------------------------------------------------------- key: equivalence

SAME_KEY = [
    # scheme and host case
    ("HTTP://EXAMPLE.COM/", "http://example.com/"),
    ("http://Example.Com/a", "http://example.com/a"),
    ("hTtPs://example.com/", "https://example.com/"),
    # empty path
    ("http://example.com", "http://example.com/"),
    ("http://example.com?x=1", "http://example.com/?x=1"),
    ("http://example.com#top", "http://example.com/"),
    # default ports
    ("http://example.com:80/", "http://example.com/"),
    ("https://example.com:443/x", "https://example.com/x"),
    ("http://[::1]:80/", "http://[::1]/"),
    # percent-escapes: case, unreserved decoded, must-encode encoded
    ("http://example.com/%7e", "http://example.com/~"),
    ("http://example.com/%41%62%63", "http://example.com/Abc"),
    ("http://example.com/%2D%2E%5F", "http://example.com/-._"),
    ("http://example.com/a%2fb", "http://example.com/a%2Fb"),
    ("http://example.com/%c3%a9", "http://example.com/%C3%A9"),
    ("http://example.com/\u00e9", "http://example.com/%C3%A9"),
    ("http://example.com/\u65e5\u672c", "http://example.com/%E6%97%A5%E6%9C%AC"),
    ("http://example.com/a|b", "http://example.com/a%7Cb"),
    ("http://example.com/a{b}", "http://example.com/a%7Bb%7D"),
    ("http://example.com/a^b`", "http://example.com/a%5Eb%60"),
    ("http://example.com/?q=%7e", "http://example.com/?q=~"),
    ("http://example.com/?q=\u00e9", "http://example.com/?q=%C3%A9"),
    ("http://example.com/?q=%c3%a9", "http://example.com/?q=%C3%A9"),
    ("http://ex%61mple.com/", "http://example.com/"),
    ("kb:doc/%7e", "kb:doc/~"),
    ("kb:a%2fb", "kb:a%2Fb"),
    ("KB:doc", "kb:doc"),
    # dot segments (also when spelled with escapes)
    ("http://example.com/a/./b/../c", "http://example.com/a/c"),
    ("http://example.com/a/%2E%2E/b", "http://example.com/b"),
    ("http://example.com/a/%2e/b", "http://example.com/a/b"),
    ("http://example.com/../../a", "http://example.com/a"),
    ("http://example.com/a/.", "http://example.com/a/"),
    ("http://example.com/a/b/..", "http://example.com/a/"),
    ("http://example.com/./", "http://example.com/"),
    # query parameter order (by name, stable)
    ("http://example.com/?b=2&a=1", "http://example.com/?a=1&b=2"),
    ("http://example.com/?c&b=2&a=1", "http://example.com/?a=1&b=2&c"),
    ("http://example.com/?b=1&a=9&b=2", "http://example.com/?a=9&b=1&b=2"),
    ("http://example.com/?%62=1&a=2", "http://example.com/?a=2&b=1"),
    # empty parameters and an empty query dropped
    ("http://example.com/?", "http://example.com/"),
    ("http://example.com/p?#f", "http://example.com/p"),
    ("http://example.com/?&&a=1&", "http://example.com/?a=1"),
    ("http://example.com/?&", "http://example.com/"),
    ("http://example.com/p?&&#x", "http://example.com/p"),
    # fragment dropped
    ("http://example.com/p#a", "http://example.com/p#b"),
    ("http://example.com/p?q=1#frag", "http://example.com/p?q=1"),
    # IDNA
    ("http://b\u00fccher.de/", "http://xn--bcher-kva.de/"),
    ("http://B\u00dcCHER.DE/", "http://xn--bcher-kva.de/"),
    # IANA test IDN: пример.испытание
    (
        "http://\u043f\u0440\u0438\u043c\u0435\u0440.\u0438\u0441\u043f\u044b\u0442\u0430\u043d\u0438\u0435/",
        "http://xn--e1afmkfd.xn--80akhbyknj4f/",
    ),
    # IPv6 literal spelling
    ("http://[FE80::1]/", "http://[fe80::1]/"),
    ("http://[0:0:0:0:0:0:0:1]/", "http://[::1]/"),
    ("http://[2001:db8:0:0:0:0:0:1]:80/", "http://[2001:db8::1]/"),
    # the root label
    ("http://example.com./", "http://example.com/"),
]


@pytest.mark.parametrize(("a", "b"), SAME_KEY)
def test_equivalent_spellings_share_a_key(a: str, b: str) -> None:
    assert key(a) == key(b)


DIFFERENT_KEY = [
    ("http://www.example.com/", "http://example.com/"),
    ("http://example.com/a", "http://example.com/a/"),
    ("http://example.com/a%2Fb", "http://example.com/a/b"),
    ("http://example.com/a%2Fb", "http://example.com/a%252Fb"),
    ("http://example.com/A", "http://example.com/a"),
    ("http://example.com/%41", "http://example.com/a"),
    ("http://example.com/?q=A", "http://example.com/?q=a"),
    ("http://example.com/?Q=a", "http://example.com/?q=a"),
    ("http://example.com/", "https://example.com/"),
    ("http://example.com:443/", "http://example.com/"),
    ("https://example.com:80/", "https://example.com/"),
    ("http://example.com:8080/", "http://example.com/"),
    ("http://example.com:8080/", "http://example.com:8081/"),
    ("http://example.com/?a=1&a=2", "http://example.com/?a=2&a=1"),
    ("http://example.com/?q=a+b", "http://example.com/?q=a%20b"),
    ("http://example.com/?q=a%2Bb", "http://example.com/?q=a+b"),
    ("http://example.com/?a=1&b=2", "http://example.com/?a=1;b=2"),
    ("http://example.com/?a=1%26b=2", "http://example.com/?a=1&b=2"),
    ("http://example.com/a/b", "http://example.com/a//b"),
    ("http://example.com/p?x", "http://example.com/p/x"),
    ("http://a.example.com/", "http://b.example.com/"),
    ("http://[::1]/", "http://[::2]/"),
    ("kb:Doc", "kb:doc"),
    ("kb:doc", "http://kb/doc"),
]


@pytest.mark.parametrize(("a", "b"), DIFFERENT_KEY)
def test_distinct_resources_keep_distinct_keys(a: str, b: str) -> None:
    assert key(a) != key(b)


# --------------------------------------------------------------------------- rejections

REJECTED = [
    pytest.param("", id="empty"),
    pytest.param("http://example.com/" + "a" * MAX_URI_LENGTH, id="too-long"),
    # whitespace and control characters
    pytest.param(" http://example.com/", id="leading-space"),
    pytest.param("http://example.com/ ", id="trailing-space"),
    pytest.param("http://example.com/a b", id="inner-space"),
    pytest.param("http://example.com/a\tb", id="tab"),
    pytest.param("http://example.com/a\r\nSet-Cookie:x", id="crlf"),
    pytest.param("http://example.com/\n", id="lf"),
    pytest.param("http://example.com/\x00", id="nul"),
    pytest.param("http://example.com/\x1b[31m", id="esc"),
    pytest.param("http://example.com/\x7f", id="del"),
    pytest.param("http://example.com/\u00a0", id="nbsp"),
    pytest.param("http://example.com/\u2028", id="line-separator"),
    pytest.param("http://example.com/\u3000", id="ideographic-space"),
    pytest.param("http://exa mple.com/", id="space-in-host"),
    # not absolute
    pytest.param("/relative/path", id="path-only"),
    pytest.param("relative/path", id="relative"),
    pytest.param("//example.com/", id="scheme-relative"),
    pytest.param("example.com", id="bare-host"),
    pytest.param(":foo", id="empty-scheme"),
    pytest.param("1http://example.com/", id="scheme-starts-with-digit"),
    pytest.param("ht_tp://example.com/", id="scheme-bad-char"),
    # schemes that are not allowed
    pytest.param("javascript:alert(1)", id="javascript"),
    pytest.param("JavaScript:alert(1)", id="javascript-mixed-case"),
    pytest.param("file:///etc/passwd", id="file"),
    pytest.param("ftp://example.com/x", id="ftp"),
    pytest.param("data:text/plain,hello", id="data"),
    pytest.param("mailto:someone@example.com", id="mailto"),
    pytest.param("ws://example.com/", id="ws"),
    # http(s) without an authority / host
    pytest.param("http:", id="http-colon"),
    pytest.param("http:example.com", id="no-slashes"),
    pytest.param("http:/example.com", id="one-slash"),
    pytest.param("http://", id="empty-authority"),
    pytest.param("https:///path", id="empty-host"),
    pytest.param("http://:80/", id="port-only"),
    pytest.param("http://?q=1", id="query-only"),
    pytest.param("http://#frag", id="fragment-only"),
    pytest.param("http://[]/", id="empty-ipv6"),
    pytest.param("http://[::1/", id="unterminated-ipv6"),
    pytest.param("http://[::1]x/", id="garbage-after-ipv6"),
    # userinfo
    pytest.param("http://user:pw@example.com/", id="user-password"),
    pytest.param("http://user@example.com/", id="user"),
    pytest.param("http://@example.com/", id="empty-userinfo"),
    pytest.param("https://a:b@[::1]/", id="userinfo-ipv6"),
    # bad ports
    pytest.param("http://example.com:0/", id="port-0"),
    pytest.param("http://example.com:65536/", id="port-too-big"),
    pytest.param("http://example.com:99999999999999999999/", id="port-huge"),
    pytest.param("http://example.com:-1/", id="port-negative"),
    pytest.param("http://example.com:+80/", id="port-plus"),
    pytest.param("http://example.com:http/", id="port-name"),
    pytest.param("http://example.com:80a/", id="port-trailing-letter"),
    pytest.param("http://example.com:8:80/", id="two-ports"),
    pytest.param("http://[::1]:x/", id="ipv6-bad-port"),
    # malformed percent-escapes
    pytest.param("http://example.com/%", id="pct-trailing"),
    pytest.param("http://example.com/%4", id="pct-one-digit"),
    pytest.param("http://example.com/%G1", id="pct-not-hex"),
    pytest.param("http://example.com/?q=%zz", id="pct-in-query"),
    pytest.param("http://example.com/#%", id="pct-in-fragment"),
    pytest.param("http://ex%ample.com/", id="pct-in-host"),
    pytest.param("kb:doc%", id="pct-internal"),
    # host names that cannot be
    pytest.param("http://exa<mple.com/", id="host-lt"),
    pytest.param("http://exa%2Fmple.com/", id="host-escaped-slash"),
    pytest.param("http://exa%20mple.com/", id="host-escaped-space"),
    pytest.param("http://exa%00mple.com/", id="host-escaped-nul"),
    pytest.param("http://a%40b.com/", id="host-escaped-at"),
    pytest.param("http://\u00e9\ufffd.com/", id="idna-prohibited-replacement-char"),
    pytest.param("http://\u00e9\ue000.com/", id="idna-prohibited-private-use"),
    pytest.param("http://\u00e9\u200e.com/", id="idna-prohibited-lrm"),
    pytest.param("http://" + "\u00e9" * 64 + ".com/", id="idna-label-too-long"),
    pytest.param("http://a!b.com/", id="host-sub-delim"),
    pytest.param("http://a~b.com/", id="host-tilde"),
    pytest.param("http://a..b.com/", id="host-empty-label"),
    pytest.param("http://example.com../", id="host-two-trailing-dots"),
    pytest.param("http://./", id="host-root-only"),
    pytest.param("http://-a.com/", id="host-label-leading-hyphen"),
    pytest.param("http://a-.com/", id="host-label-trailing-hyphen"),
    pytest.param("http://" + "a" * 64 + ".com/", id="host-label-64"),
    pytest.param("http://" + ".".join(["a" * 60] * 5) + "/", id="host-over-253"),
    pytest.param("http://xn--zz.com/", id="host-bad-punycode"),
    pytest.param("http://256.1.1.1/", id="ipv4-octet-256"),
    pytest.param("http://[not-an-ip]/", id="ipv6-not-an-address"),
    pytest.param("http://[\u00e9]/", id="ipv6-non-ascii"),
    pytest.param("http://[::1::2]/", id="ipv6-two-double-colons"),
    pytest.param("http://[1.2.3.4]/", id="ipv6-brackets-around-ipv4"),
    pytest.param("http://[v1.fe]/", id="ipvfuture"),
    # characters that reach the host only once %-escapes are decoded, or via IDNA
    pytest.param("http://user%3Apw%40x.\u00e9/", id="idn-host-escaped-userinfo"),
    pytest.param("http://\u00e9.a%2Fb/c", id="idn-host-escaped-slash"),
    pytest.param("http://\u00e9.a%20b/", id="idn-host-escaped-space"),
    pytest.param("http://\u00e9.a%00b/", id="idn-host-escaped-nul"),
    pytest.param("http://\u00e9.a%3Cb/", id="idn-host-escaped-lt"),
    pytest.param("http://\u00e9.%2541/", id="idn-host-escaped-percent"),
    pytest.param("http://'1-].\u00de/", id="idn-host-bracket-label"),
    # never legal in a URI, refused rather than encoded
    pytest.param('http://example.com/a"b', id="dquote"),
    pytest.param("http://example.com/a<b>", id="angle-brackets"),
    pytest.param("http://example.com/a\\b", id="backslash"),
    pytest.param("http://example.com/?q=<script>", id="lt-in-query"),
    pytest.param('http://example.com/#"', id="dquote-in-fragment"),
    pytest.param("http://\u00e9<script>.com/", id="lt-in-idn-host"),
    pytest.param('http://[<x>"]/', id="lt-in-ip-literal"),
    pytest.param('kb:doc"x', id="dquote-internal"),
    # C0 and C1 controls
    pytest.param("http://example.com/\x9b31m", id="c1-csi"),
    pytest.param("http://example.com/\x80", id="c1-first"),
    pytest.param("kb:\x9f", id="c1-last-internal"),
    # internal scheme with nothing after it
    pytest.param("kb:", id="kb-empty"),
]


@pytest.mark.parametrize("raw", REJECTED)
def test_rejected(raw: str) -> None:
    with pytest.raises(InvalidURI):
        parse_uri_r(raw)


@pytest.mark.parametrize("raw", [None, b"http://example.com/", 42])
def test_non_strings_are_rejected(raw: object) -> None:
    with pytest.raises(InvalidURI):
        parse_uri_r(raw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- known bugs
# Each of these fails today; the reason names the defect. Remove the mark once fixed.


def test_fixed_superscript_digit_port_crashes() -> None:
    with pytest.raises(InvalidURI):
        parse_uri_r("http://example.com:\u00b2/")


def test_fixed_non_ascii_digit_port_accepted() -> None:
    with pytest.raises(InvalidURI):
        parse_uri_r("http://example.com:\u0668\u0660/")


@pytest.mark.parametrize("raw", ["http://example.com/\ud800", "kb:\udfff"])
def test_fixed_lone_surrogate_crashes(raw: str) -> None:
    with pytest.raises(InvalidURI):
        parse_uri_r(raw)


# --------------------------------------------------------------------------- properties

_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_ASCII_LABEL = st.builds(
    lambda first, middle: first + middle,
    st.sampled_from(_ALNUM[:52]),
    st.text(alphabet=_ALNUM + "-", max_size=8).map(lambda t: t + "x" if t.endswith("-") else t),
)
_IDN_LABEL = st.sampled_from(
    [
        "b\u00fccher",
        "caf\u00e9",
        "M\u00fcnchen",
        "\u65e5\u672c",
        "\u043f\u0440\u0438\u043c\u0435\u0440",
        "\u00e9",
        "\u0928\u092e\u0938\u094d\u0924\u0947",
        "xn--bcher-kva",
    ]
)
_HOST = st.one_of(
    st.lists(st.one_of(_ASCII_LABEL, _IDN_LABEL), min_size=1, max_size=4).map(".".join),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda a: f"[{a.exploded}]"),
)
_PORT = st.one_of(
    st.just(""),
    st.sampled_from([":80", ":443"]),
    st.integers(1, 65535).map(lambda p: f":{p}"),
)
_PCT = st.tuples(st.integers(0, 255), st.booleans()).map(
    lambda t: f"%{t[0]:02x}" if t[1] else f"%{t[0]:02X}"
)
# Characters that may appear in a path segment (raw), including ones the key must encode.
_SEG_CHAR = st.one_of(
    st.sampled_from(list("abcXYZ019-._~!$&'()*+,;=:@")),
    st.sampled_from(list("{}|^`[]")),
    st.characters(min_codepoint=0xA1, max_codepoint=0x2FFF).filter(lambda c: not c.isspace()),
    _PCT,
)
_SEGMENT = st.one_of(
    st.lists(_SEG_CHAR, max_size=6).map("".join),
    st.sampled_from([".", "..", "%2E", "%2e%2E"]),
)
_PATH = st.lists(_SEGMENT, max_size=5).map(lambda segs: "".join("/" + s for s in segs))
_QCHAR = st.one_of(_SEG_CHAR.filter(lambda c: c not in "&="), st.sampled_from(list("/?")))
_PARAM = st.tuples(
    st.lists(_QCHAR, max_size=4).map("".join),
    st.one_of(st.none(), st.lists(st.one_of(_QCHAR, st.just("=")), max_size=5).map("".join)),
).map(lambda nv: nv[0] if nv[1] is None else f"{nv[0]}={nv[1]}")
_QUERY = st.one_of(
    st.just(""),
    st.lists(_PARAM, max_size=5).map(lambda ps: "?" + "&".join(ps)),
)
_FRAGMENT = st.one_of(st.just(""), st.lists(_QCHAR, max_size=5).map(lambda cs: "#" + "".join(cs)))
_SCHEME = st.sampled_from(["http", "https", "HTTP", "Https"])

WEB_URLS = st.builds(
    lambda scheme, host, port, path, query, frag: f"{scheme}://{host}{port}{path}{query}{frag}",
    _SCHEME,
    _HOST,
    _PORT,
    _PATH,
    _QUERY,
    _FRAGMENT,
)
KB_URIS = st.lists(_SEG_CHAR | st.sampled_from(list("/?#")), min_size=1, max_size=12).map(
    lambda cs: "kb:" + "".join(cs)
)

_KEY_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")


@COMPOSITE
@given(WEB_URLS)
def test_web_key_is_idempotent_and_clean(raw: str) -> None:
    uri = parse_uri_r(raw)
    assert uri.raw == raw
    assert uri.scheme in ("http", "https")
    assert parse_uri_r(uri.key).key == uri.key
    assert uri.key.startswith(uri.scheme + "://")
    assert "#" not in uri.key
    if "?" in uri.key:
        assert uri.key.split("?", 1)[1], "an empty query is dropped from the key"
    assert _KEY_CHARS.fullmatch(uri.key), uri.key
    # every escape in the key is upper-case and never encodes an unreserved character
    for esc in re.findall(r"%(..)", uri.key):
        assert esc == esc.upper()
        assert chr(int(esc, 16)) not in (
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
        )
    # no dot segments survive in the path
    path = uri.key.split("://", 1)[1].split("?", 1)[0]
    path = path[path.index("/") :] if "/" in path else "/"
    assert not {".", ".."} & set(path.split("/")[1:])


@FAST
@given(KB_URIS)
def test_internal_key_is_idempotent(raw: str) -> None:
    uri = parse_uri_r(raw)
    assert uri.scheme == "kb"
    assert parse_uri_r(uri.key).key == uri.key
    assert uri.key.isascii()


@COMPOSITE
@given(WEB_URLS, st.randoms(use_true_random=False))
def test_query_order_of_distinct_names_does_not_matter(raw: str, rnd) -> None:
    base, _, query = raw.split("#", 1)[0].partition("?")
    params = [p for p in query.split("&") if p]
    names = [urllib.parse.unquote(p.partition("=")[0]) for p in params]
    if len(set(names)) != len(names):
        params = list({n: p for n, p in zip(names, params, strict=True)}.values())
    shuffled = params[:]
    rnd.shuffle(shuffled)
    assert key(base + "?" + "&".join(params)) == key(base + "?" + "&".join(shuffled))


@COMPOSITE
@given(WEB_URLS)
def test_case_of_scheme_host_and_escapes_does_not_matter(raw: str) -> None:
    scheme, rest = raw.split("://", 1)
    slash = [i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0]
    cut = min(slash) if slash else len(rest)
    host, tail = rest[:cut], rest[cut:]
    upper_escapes = re.sub(r"%[0-9a-fA-F]{2}", lambda m: m.group(0).upper(), tail)
    lower_escapes = re.sub(r"%[0-9a-fA-F]{2}", lambda m: m.group(0).lower(), tail)
    a = key(f"{scheme.upper()}://{host.upper()}{upper_escapes}")
    b = key(f"{scheme.lower()}://{host.lower()}{lower_escapes}")
    assert a == b


@FAST
@given(st.text(max_size=60))
def test_never_crashes_on_arbitrary_text(raw: str) -> None:
    try:
        uri = parse_uri_r(raw)
    except InvalidURI:
        return
    assert uri.raw == raw


@FAST
@given(
    st.sampled_from(
        ["http://", "https://", "kb:", "HTTP://", "http://example.com", "http://[::1]"]
    ),
    st.text(
        alphabet=st.one_of(
            st.sampled_from(list(":/?#[]@%.!$&'()*+,;=-_~")),
            # Cs (lone surrogates) and No ('²' passes str.isdigit() but not int()) are known
            # crashes, pinned by test_bug_lone_surrogate_crashes and
            # test_bug_superscript_digit_port_crashes; excluded so this stays deterministic.
            st.characters(exclude_categories=("Cs", "No")),
        ),
        max_size=40,
    ),
)
def test_never_crashes_on_url_like_text(prefix: str, tail: str) -> None:
    try:
        uri = parse_uri_r(prefix + tail)
    except InvalidURI:
        return
    assert uri.scheme in ("http", "https", "kb")


_UNSAFE_IN_HEADER = set('<>" \r\n')


@FAST
@given(st.text(max_size=80))
def test_to_ascii_uri_is_ascii_and_header_safe(uri: str) -> None:
    out = to_ascii_uri(uri)
    assert out.isascii()
    assert not _UNSAFE_IN_HEADER & set(out)
    assert all(0x20 < ord(ch) < 0x7F for ch in out)
    assert to_ascii_uri(out) == out  # idempotent
    if "%" not in uri:
        assert urllib.parse.unquote(out, errors="strict") == uri  # lossless


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("http://example.com/a?b=c#d", "http://example.com/a?b=c#d"),
        ("http://example.com/caf\u00e9", "http://example.com/caf%C3%A9"),
        ('http://x/"><script>', "http://x/%22%3E%3Cscript%3E"),
        ("http://x/a b\r\nc", "http://x/a%20b%0D%0Ac"),
        ("http://x/%41", "http://x/%41"),
    ],
)
def test_to_ascii_uri_examples(uri: str, expected: str) -> None:
    assert to_ascii_uri(uri) == expected


def test_unprintable_characters_are_exactly_controls_whitespace_and_surrogates() -> None:
    # parse_uri_r searches one regex instead of testing each character in Python; this is
    # the per-character rule it replaced, checked over every code point.
    from archive.uri import _UNPRINTABLE

    def refused(cp: int) -> bool:
        return cp < 0x20 or 0x7F <= cp <= 0x9F or chr(cp).isspace() or 0xD800 <= cp <= 0xDFFF

    assert [cp for cp in range(0x110000) if bool(_UNPRINTABLE.search(chr(cp))) != refused(cp)] == []


def test_remembered_parses_answer_as_fresh_ones_and_failures_are_never_remembered() -> None:
    from archive import uri as uri_module

    short = "HTTPS://Example.ORG:443/a/../b?z=1&a=%2f"
    long = short + "&pad=" + "x" * uri_module._MEMO_LENGTH  # too long to be remembered
    for raw in (short, long):
        fresh = uri_module._parse(raw, ("kb",))
        assert parse_uri_r(raw) == fresh and parse_uri_r(raw) == fresh
    assert parse_uri_r("kb:doc/1", ["KB"]) == parse_uri_r("kb:doc/1", ("KB",))  # any iterable
    for _ in range(2):
        with pytest.raises(InvalidURI):
            parse_uri_r("ftp://example.org/")
    with pytest.raises(InvalidURI):
        parse_uri_r("kb:doc/1", ())  # the same URI-R, remembered above, under other schemes
