"""archive.dates: strict RFC 1123 (IMF-fixdate) and RFC 3339."""

from __future__ import annotations

import email.utils
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archive.dates import (
    parse_rfc1123,
    parse_rfc3339,
    to_14digit,
    to_rfc1123,
    to_rfc3339,
    utc_now,
)
from archive.exceptions import InvalidDatetime

FAST = settings(max_examples=200, deadline=None, database=None)

WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
IMF_FIXDATE = re.compile(
    r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{2} "
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [0-9]{4} "
    r"[0-9]{2}:[0-9]{2}:[0-9]{2} GMT"
)

# Second-precision UTC datetimes over the whole range datetime can represent.
UTC_SECONDS = st.datetimes(
    min_value=datetime(1, 1, 1),
    max_value=datetime(9999, 12, 31, 23, 59, 59),
    timezones=st.just(UTC),
).map(lambda d: d.replace(microsecond=0))
OFFSETS = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
# Aware datetimes with arbitrary offsets; kept a day away from the upper edge so converting
# to UTC cannot leave the representable range, and from year 1000 on because years < 1000
# are a known bug in to_rfc3339/to_14digit (pinned by test_bug_*_years_before_1000 below).
AWARE = st.datetimes(
    min_value=datetime(1000, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=OFFSETS,
)


# --------------------------------------------------------------------------- RFC 1123


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC), "Wed, 01 May 2024 12:00:00 GMT"),
        (datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC), "Sun, 06 Nov 1994 08:49:37 GMT"),
        (datetime(2010, 4, 1, 0, 0, 0, tzinfo=UTC), "Thu, 01 Apr 2010 00:00:00 GMT"),
        (datetime(2024, 2, 29, 23, 59, 59, tzinfo=UTC), "Thu, 29 Feb 2024 23:59:59 GMT"),
        (datetime(1, 1, 1, tzinfo=UTC), "Mon, 01 Jan 0001 00:00:00 GMT"),
        (datetime(999, 12, 31, 9, 5, 7, tzinfo=UTC), "Tue, 31 Dec 0999 09:05:07 GMT"),
    ],
)
def test_rfc1123_known_values(moment: datetime, text: str) -> None:
    assert to_rfc1123(moment) == text
    assert parse_rfc1123(text) == moment


def test_to_rfc1123_converts_to_utc_and_drops_microseconds() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert to_rfc1123(datetime(2024, 5, 1, 14, 0, 0, 999999, tzinfo=plus_two)) == (
        "Wed, 01 May 2024 12:00:00 GMT"
    )
    # crossing midnight backwards changes the day and the weekday
    minus_five = timezone(timedelta(hours=-5))
    assert to_rfc1123(datetime(2024, 4, 30, 22, 0, tzinfo=minus_five)) == (
        "Wed, 01 May 2024 03:00:00 GMT"
    )


def test_parse_rfc1123_returns_aware_utc() -> None:
    moment = parse_rfc1123("Wed, 01 May 2024 12:00:00 GMT")
    assert moment.tzinfo is not None
    assert moment.utcoffset() == timedelta(0)


RFC1123_REFUSED = [
    pytest.param("", id="empty"),
    pytest.param("Wed, 01 May 2024 12:00:00 +0000", id="numeric-offset"),
    pytest.param("Wed, 01 May 2024 12:00:00 UTC", id="utc-instead-of-gmt"),
    pytest.param("Wed, 01 May 2024 12:00:00 gmt", id="lowercase-gmt"),
    pytest.param("Wed, 01 May 2024 12:00:00", id="no-zone"),
    pytest.param("01 May 2024 12:00:00 GMT", id="no-weekday"),
    pytest.param("Thu, 01 May 2024 12:00:00 GMT", id="wrong-weekday"),
    pytest.param("wed, 01 May 2024 12:00:00 GMT", id="lowercase-weekday"),
    pytest.param("Wednesday, 01 May 2024 12:00:00 GMT", id="long-weekday"),
    pytest.param("Wed, 01 May 24 12:00:00 GMT", id="two-digit-year"),
    pytest.param("Wed, 1 May 2024 12:00:00 GMT", id="one-digit-day"),
    pytest.param("Wed, 01 MAY 2024 12:00:00 GMT", id="uppercase-month"),
    pytest.param("Wed, 01 may 2024 12:00:00 GMT", id="lowercase-month"),
    pytest.param("Wed, 01 Foo 2024 12:00:00 GMT", id="unknown-month"),
    pytest.param("Wed, 01 May 2024 12:00 GMT", id="no-seconds"),
    pytest.param("Wed, 01 May 2024 12:00:00.5 GMT", id="fraction"),
    pytest.param("Wed,  01 May 2024 12:00:00 GMT", id="double-space-after-comma"),
    pytest.param("Wed, 01  May 2024 12:00:00 GMT", id="double-space-after-day"),
    pytest.param("Wed, 01 May 2024  12:00:00 GMT", id="double-space-before-time"),
    pytest.param("Wed, 01 May 2024 12:00:00  GMT", id="double-space-before-gmt"),
    pytest.param("Wed,01 May 2024 12:00:00 GMT", id="no-space-after-comma"),
    pytest.param("Wed 01 May 2024 12:00:00 GMT", id="no-comma"),
    pytest.param("Wed, 01-May-2024 12:00:00 GMT", id="dashes"),
    pytest.param("Wednesday, 01-May-24 12:00:00 GMT", id="rfc850"),
    pytest.param("Wed May  1 12:00:00 2024", id="asctime"),
    pytest.param("2024-05-01T12:00:00Z", id="rfc3339"),
    pytest.param("Wed, 01 May 2024 12:00:00 GMT x", id="trailing-garbage"),
    pytest.param("Wed, 01 May 2024 12:00:00 GMT\r\nX: y", id="header-injection"),
    pytest.param("Wed, 31 Apr 2024 12:00:00 GMT", id="april-31"),
    pytest.param("Wed, 29 Feb 2023 12:00:00 GMT", id="feb-29-non-leap"),
    pytest.param("Wed, 00 May 2024 12:00:00 GMT", id="day-zero"),
    pytest.param("Wed, 01 May 2024 24:00:00 GMT", id="hour-24"),
    pytest.param("Wed, 01 May 2024 12:60:00 GMT", id="minute-60"),
    pytest.param("Wed, 01 May 2024 23:59:60 GMT", id="leap-second"),
    pytest.param("Sat, 01 Jan 0000 00:00:00 GMT", id="year-zero"),
]


@pytest.mark.parametrize("text", RFC1123_REFUSED)
def test_rfc1123_refused(text: str) -> None:
    with pytest.raises(InvalidDatetime):
        parse_rfc1123(text)


@pytest.mark.parametrize("value", [None, 1714564800, b"Wed, 01 May 2024 12:00:00 GMT"])
def test_rfc1123_refuses_non_strings(value: object) -> None:
    with pytest.raises(InvalidDatetime):
        parse_rfc1123(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "Wed, \u0660\u0661 May 2024 12:00:00 GMT",  # Arabic-Indic 01
        "Wed, \uff10\uff11 May 2024 12:00:00 GMT",  # fullwidth 01
        "Wed, 01 May \uff12\uff10\uff12\uff14 12:00:00 GMT",  # fullwidth 2024
    ],
)
def test_fixed_rfc1123_accepts_non_ascii_digits(text: str) -> None:
    with pytest.raises(InvalidDatetime):
        parse_rfc1123(text)


@FAST
@given(UTC_SECONDS)
def test_rfc1123_round_trip(moment: datetime) -> None:
    text = to_rfc1123(moment)
    assert IMF_FIXDATE.fullmatch(text), text
    assert text.isascii()
    assert text == email.utils.format_datetime(moment, usegmt=True)  # stdlib agrees
    assert parse_rfc1123(text) == moment


@FAST
@given(UTC_SECONDS, st.integers(1, 6))
def test_rfc1123_any_other_weekday_is_refused(moment: datetime, shift: int) -> None:
    text = to_rfc1123(moment)
    wrong = WEEKDAYS[(WEEKDAYS.index(text[:3]) + shift) % 7]
    with pytest.raises(InvalidDatetime):
        parse_rfc1123(wrong + text[3:])


@FAST
@given(AWARE)
def test_rfc1123_of_any_offset_is_the_same_instant_truncated(moment: datetime) -> None:
    parsed = parse_rfc1123(to_rfc1123(moment))
    assert parsed == moment.replace(microsecond=0)


@FAST
@given(st.text(max_size=40))
def test_rfc1123_never_crashes(text: str) -> None:
    try:
        parsed = parse_rfc1123(text)
    except InvalidDatetime:
        return
    assert parsed.utcoffset() == timedelta(0)


# --------------------------------------------------------------------------- RFC 3339


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01t12:00:00z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01 12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T12:00:00+00:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T12:00:00-00:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T14:30:00+02:30", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-04-30T23:00:00-13:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T12:00:00.5Z", datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=UTC)),
        ("2024-05-01T12:00:00.000001Z", datetime(2024, 5, 1, 12, 0, 0, 1, tzinfo=UTC)),
        # digits beyond microseconds are dropped (truncated, not rounded)
        ("2024-05-01T12:00:00.123456789Z", datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2024-05-01T12:00:00.9999999Z", datetime(2024, 5, 1, 12, 0, 0, 999999, tzinfo=UTC)),
        ("2024-02-29T00:00:00Z", datetime(2024, 2, 29, tzinfo=UTC)),
    ],
)
def test_rfc3339_parse(text: str, expected: datetime) -> None:
    parsed = parse_rfc3339(text)
    assert parsed == expected
    assert parsed.utcoffset() == timedelta(0)
    assert parsed.tzinfo == UTC


RFC3339_REFUSED = [
    pytest.param("", id="empty"),
    pytest.param("2024-05-01T12:00:00", id="no-offset"),
    pytest.param("2024-05-01T12:00:00.5", id="no-offset-fraction"),
    pytest.param("2024-05-01", id="date-only"),
    pytest.param("12:00:00Z", id="time-only"),
    pytest.param("2024-05-01T12:00Z", id="no-seconds"),
    pytest.param("2024-05-01T12:00:00+0200", id="offset-without-colon"),
    pytest.param("2024-05-01T12:00:00+02", id="offset-hours-only"),
    pytest.param("2024-05-01T12:00:00 Z", id="space-before-z"),
    pytest.param("2024-05-01T12:00:00.Z", id="empty-fraction"),
    pytest.param("2024-05-01T12:00:00,5Z", id="comma-fraction"),
    pytest.param("2024-5-1T12:00:00Z", id="unpadded-date"),
    pytest.param("24-05-01T12:00:00Z", id="two-digit-year"),
    pytest.param("20240501T120000Z", id="basic-format"),
    pytest.param("2024-05-01X12:00:00Z", id="bad-separator"),
    pytest.param("2024-13-01T12:00:00Z", id="month-13"),
    pytest.param("2024-02-30T12:00:00Z", id="feb-30"),
    pytest.param("2023-02-29T12:00:00Z", id="feb-29-non-leap"),
    pytest.param("2024-05-01T24:00:00Z", id="hour-24"),
    pytest.param("2024-05-01T12:00:60Z", id="leap-second"),
    pytest.param("2024-05-01T12:00:00+24:00", id="offset-24h"),
    pytest.param("0000-01-01T00:00:00Z", id="year-zero"),
    pytest.param("Wed, 01 May 2024 12:00:00 GMT", id="rfc1123"),
    pytest.param("2024-05-01T12:00:00Z trailing", id="trailing-garbage"),
    pytest.param("\u0662\u0660\u0662\u0664-05-01T12:00:00Z", id="arabic-digits"),
]


@pytest.mark.parametrize("text", RFC3339_REFUSED)
def test_rfc3339_refused(text: str) -> None:
    with pytest.raises(InvalidDatetime):
        parse_rfc3339(text)


@pytest.mark.parametrize("value", [None, 1714564800, datetime(2024, 5, 1, tzinfo=UTC)])
def test_rfc3339_refuses_non_strings(value: object) -> None:
    with pytest.raises(InvalidDatetime):
        parse_rfc3339(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"])
def test_fixed_rfc3339_overflow_at_range_edges(text: str) -> None:
    with pytest.raises(InvalidDatetime):
        parse_rfc3339(text)


def test_fixed_rfc3339_accepts_offset_minute_60() -> None:
    with pytest.raises(InvalidDatetime):
        parse_rfc3339("2024-05-01T12:00:00+02:60")


@pytest.mark.parametrize("year", [1, 999])
def test_fixed_to_rfc3339_years_before_1000(year: int) -> None:
    moment = datetime(year, 1, 1, tzinfo=UTC)
    text = to_rfc3339(moment)
    assert text == f"{year:04d}-01-01T00:00:00Z"
    assert parse_rfc3339(text) == moment


def test_fixed_to_14digit_years_before_1000() -> None:
    assert to_14digit(datetime(999, 1, 1, tzinfo=UTC)) == "09990101000000"


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (datetime(2024, 5, 1, 12, tzinfo=UTC), "2024-05-01T12:00:00Z"),
        (datetime(2024, 5, 1, 12, 0, 0, 1, tzinfo=UTC), "2024-05-01T12:00:00.000001Z"),
        (datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=UTC), "2024-05-01T12:00:00.500000Z"),
        (datetime(2024, 5, 1, 14, tzinfo=timezone(timedelta(hours=2))), "2024-05-01T12:00:00Z"),
    ],
)
def test_to_rfc3339(moment: datetime, text: str) -> None:
    assert to_rfc3339(moment) == text


@FAST
@given(AWARE)
def test_rfc3339_round_trip_keeps_the_instant_to_the_microsecond(moment: datetime) -> None:
    text = to_rfc3339(moment)
    assert text.endswith("Z")
    assert text.isascii()
    parsed = parse_rfc3339(text)
    assert parsed == moment
    assert parsed.utcoffset() == timedelta(0)
    assert to_rfc3339(parsed) == text


@FAST
@given(
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.integers(-(23 * 60 + 59), 23 * 60 + 59),
)
def test_rfc3339_offsets_are_applied(naive: datetime, minutes: int) -> None:
    sign = "+" if minutes >= 0 else "-"
    hh, mm = divmod(abs(minutes), 60)
    text = naive.isoformat(timespec="microseconds") + f"{sign}{hh:02d}:{mm:02d}"
    expected = naive.replace(tzinfo=UTC) - timedelta(minutes=minutes)
    assert parse_rfc3339(text) == expected


@FAST
@given(st.text(max_size=40))
def test_rfc3339_never_crashes(text: str) -> None:
    try:
        parsed = parse_rfc3339(text)
    except InvalidDatetime:
        return
    assert parsed.utcoffset() == timedelta(0)


# --------------------------------------------------------------------------- misc


def test_to_14digit() -> None:
    assert to_14digit(datetime(2024, 5, 1, 12, 3, 4, 999, tzinfo=UTC)) == "20240501120304"
    assert to_14digit(datetime(2024, 5, 1, 1, 0, 0, tzinfo=timezone(timedelta(hours=3)))) == (
        "20240430220000"
    )


@FAST
@given(AWARE)
def test_to_14digit_matches_rfc3339(moment: datetime) -> None:
    digits = to_14digit(moment)
    assert re.fullmatch(r"[0-9]{14}", digits)
    assert digits == re.sub(r"[^0-9]", "", to_rfc3339(moment).split(".")[0])


def test_utc_now_is_aware_utc() -> None:
    before = datetime.now(UTC)
    now = utc_now()
    after = datetime.now(UTC)
    assert now.utcoffset() == timedelta(0)
    assert before <= now <= after
