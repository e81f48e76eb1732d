"""The time a capture carries, as UTC nanoseconds. Pure.

nvidia-smi prints the local time of the machine it ran on, without a zone:
`<timestamp>Fri Jan 27 11:32:31 2023</timestamp>` in `-q -x`, `2026/07/03 08:33:38.737` in the
`timestamp` field of `--query-gpu`. Such a time is read in a named zone (`zone("UTC")`,
`zone("Europe/Berlin")`); the caller says which, and says so to the user. Exposition sample
timestamps are epoch milliseconds, already UTC.
"""

from __future__ import annotations

import re
from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpulens.errors import ConfigError

_XML_FORMAT = "%a %b %d %H:%M:%S %Y"
_CSV_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


def zone(name: str) -> tzinfo:
    """The time zone called `name` (an IANA name such as `UTC` or `Europe/Berlin`)."""
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"unknown time zone {name!r}: use an IANA name such as UTC, Europe/Berlin or "
            "America/New_York (the zone of the machine where nvidia-smi ran)"
        ) from None


def _utc_ns(local: datetime, tz: tzinfo) -> int:
    aware = local.replace(tzinfo=tz)
    seconds = int(aware.timestamp())
    return seconds * 1_000_000_000 + aware.microsecond * 1000


def nvsmi_xml_time(text: str, tz: tzinfo) -> int | None:
    """`Fri Aug  4 11:44:30 2023` read in `tz`, as UTC ns; None when it is not such a time."""
    try:
        local = datetime.strptime(re.sub(r"\s+", " ", text.strip()), _XML_FORMAT)
    except ValueError:
        return None
    return _utc_ns(local, tz)


def nvsmi_csv_time(text: str, tz: tzinfo) -> int | None:
    """`2026/07/03 08:33:38.737` read in `tz`, as UTC ns; None when it is not such a time."""
    for fmt in _CSV_FORMATS:
        try:
            local = datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
        return _utc_ns(local, tz)
    return None


def sample_time(token: str) -> int | None:
    """An exposition sample timestamp (epoch milliseconds) as UTC ns; None if not one."""
    try:
        ms = int(token)
    except ValueError:
        return None
    return ms * 1_000_000 if ms > 0 else None
