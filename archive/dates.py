"""The two date formats Amber speaks, strictly.

- RFC 3339 (``2024-05-01T12:00:00Z``) in JSON.
- RFC 1123 GMT (``Wed, 01 May 2024 12:00:00 GMT``) in ``Memento-Datetime``,
  ``Accept-Datetime`` and link-format ``datetime`` attributes (RFC 7089 §2.1.1). Only the
  exact IMF-fixdate form is accepted: ``+0000`` instead of ``GMT``, a missing weekday or a
  weekday that does not match the date are all refused.

All datetimes inside Amber are timezone-aware UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from archive.exceptions import InvalidDatetime

_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_RFC1123 = re.compile(
    r"(?P<wd>Mon|Tue|Wed|Thu|Fri|Sat|Sun), (?P<d>\d{2}) (?P<mon>[A-Z][a-z]{2}) (?P<y>\d{4}) "
    r"(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2}) GMT"
)
_RFC3339 = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<time>\d{2}:\d{2}:\d{2})(?P<frac>\.\d{1,9})?"
    r"(?P<tz>[Zz]|[+\-]\d{2}:\d{2})"
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
            int(match["y"]), _MONTHS.index(match["mon"]) + 1, int(match["d"]),
            int(match["h"]), int(match["mi"]), int(match["s"]), tzinfo=UTC,
        )
    except ValueError as exc:
        raise InvalidDatetime("datetime is not a real calendar date") from exc
    if _WEEKDAYS[moment.weekday()] != match["wd"]:
        raise InvalidDatetime("weekday does not match the date")
    return moment


def to_rfc3339(moment: datetime) -> str:
    moment = moment.astimezone(UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}"
    return text + "Z"


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 timestamp (an offset is required); returns UTC."""
    match = _RFC3339.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match:
        raise InvalidDatetime("datetime must be RFC 3339 with an offset, e.g. '2024-05-01T12:00:00Z'")
    frac = (match["frac"] or "")[:7]  # Python keeps microseconds; extra digits are dropped
    tz = "+00:00" if match["tz"] in ("Z", "z") else match["tz"]
    try:
        moment = datetime.fromisoformat(f"{match['date']}T{match['time']}{frac}{tz}")
    except ValueError as exc:
        raise InvalidDatetime("datetime is not a real calendar date or time") from exc
    return moment.astimezone(UTC)


def to_14digit(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%d%H%M%S")
