"""Times on the command line: ISO 8601 (UTC unless an offset is given) or a duration back from
now such as 30m, 12h, 7d, 2w."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from gpulens.errors import ConfigError

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str | None, now_ns: int, option: str) -> int | None:
    """Integer UTC nanoseconds for `text`, or None when not given."""
    if text is None:
        return None
    match = _DURATION.match(text.strip())
    if match:
        seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
        return now_ns - int(seconds * 1e9)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"{option} {text!r} is neither an ISO 8601 time (2026-11-29T14:00:00Z) nor a "
            "duration back from now (30m, 12h, 7d, 2w)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000
