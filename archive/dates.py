"""The two date formats Amber speaks, strictly.

- RFC 3339 (``2024-05-01T12:00:00Z``) in JSON.
- RFC 1123 GMT (``Wed, 01 May 2024 12:00:00 GMT``) in ``Memento-Datetime``,
  ``Accept-Datetime`` and link-format ``datetime`` attributes (RFC 7089 §2.1.1). Only the
  exact IMF-fixdate form is accepted: ``+0000`` instead of ``GMT``, a missing weekday or a
  weekday that does not match the date are all refused.

All datetimes inside Amber are timezone-aware UTC.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta

from archive.exceptions import InvalidDatetime

_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_RFC1123 = re.compile(
    r"(?P<wd>Mon|Tue|Wed|Thu|Fri|Sat|Sun), (?P<d>[0-9]{2}) (?P<mon>[A-Z][a-z]{2}) (?P<y>[0-9]{4}) "
    r"(?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2}) GMT"
)
_RFC3339 = re.compile(
    r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ](?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"(?P<frac>\.[0-9]{1,9})?(?P<tz>[Zz]|[+\-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)


def utc_now() -> datetime:
    return datetime.now(UTC)


def to_rfc1123(moment: datetime) -> str:
    moment = moment.astimezone(UTC)
    return (
        f"{_WEEKDAYS[moment.weekday()]}, {moment.day:02d} {_MONTHS[moment.month - 1]} "
        f"{moment.year:04d} {moment.hour:02d}:{moment.minute:02d}:{moment.second:02d} GMT"
    )


def parse_rfc1123(text: str) -> datetime:
    match = _RFC1123.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match or match["mon"] not in _MONTHS:
        raise InvalidDatetime("datetime must be RFC 1123 GMT, e.g. 'Wed, 01 May 2024 12:00:00 GMT'")
    try:
        moment = datetime(
            int(match["y"]),
            _MONTHS.index(match["mon"]) + 1,
            int(match["d"]),
            int(match["h"]),
            int(match["mi"]),
            int(match["s"]),
            tzinfo=UTC,
        )
    except ValueError as exc:
        raise InvalidDatetime("datetime is not a real calendar date") from exc
    if _WEEKDAYS[moment.weekday()] != match["wd"]:
        raise InvalidDatetime("weekday does not match the date")
    return moment


def to_rfc3339(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``. isoformat (C) pads years below 1000, which
    strftime does not on glibc, and is several times cheaper than formatting each field."""
    return moment.astimezone(UTC).isoformat()[:-6] + "Z"  # "+00:00" -> "Z"


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 timestamp (an offset is required); returns UTC."""
    match = _RFC3339.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match:
        raise InvalidDatetime(
            "datetime must be RFC 3339 with an offset, e.g. '2024-05-01T12:00:00Z'"
        )
    frac = (match["frac"] or "")[:7]  # Python keeps microseconds; extra digits are dropped
    tz = "+00:00" if match["tz"] in ("Z", "z") else match["tz"]
    try:
        moment = datetime.fromisoformat(f"{match['date']}T{match['time']}{frac}{tz}")
        return moment.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise InvalidDatetime("datetime is not a real (representable) date or time") from exc


def to_14digit(moment: datetime) -> str:
    return (
        to_rfc3339(moment.replace(microsecond=0))[:19]
        .replace("-", "")
        .replace(":", "")
        .replace("T", "")
    )


_DURATION = re.compile(
    r"P(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+)S)?)?"
)


def add_iso8601_duration(start: datetime, duration: str) -> datetime:
    """``start`` plus an ISO 8601 duration (``P7Y``, ``P30D``, ``PT10S``, ``P1Y2M3DT4H``).

    Years and months are calendar arithmetic (7 years after 29 Feb is 28 Feb), the rest is
    exact. Fractions and negative durations are refused: retention only counts forward.
    """
    match = _DURATION.fullmatch(duration) if isinstance(duration, str) else None
    if not match or duration in ("P", "PT") or duration.endswith("T"):
        raise InvalidDatetime("retention must be an ISO 8601 duration such as 'P7Y' or 'PT10S'")
    parts = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    months = parts.get("years", 0) * 12 + parts.get("months", 0)
    if months > 12 * 1000:
        raise InvalidDatetime("retention longer than 1000 years")
    moved = _add_months(start, months)
    try:
        return moved + timedelta(
            weeks=parts.get("weeks", 0),
            days=parts.get("days", 0),
            hours=parts.get("hours", 0),
            minutes=parts.get("minutes", 0),
            seconds=parts.get("seconds", 0),
        )
    except OverflowError as exc:
        raise InvalidDatetime("retention duration is out of range") from exc


def _add_months(start: datetime, months: int) -> datetime:
    index = start.month - 1 + months
    year, month = start.year + index // 12, index % 12 + 1
    day = min(start.day, calendar.monthrange(year, month)[1])
    return start.replace(year=year, month=month, day=day)
