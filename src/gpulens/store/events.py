"""Event rows (deploys, version changes, engine builds, fallbacks...) of a time window."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa

from gpulens.store.query import Queryable

NS = 1_000_000_000

EVENTS_SQL = """
SELECT * EXCLUDE (ts), epoch_ns(ts) AS ts FROM event
WHERE ts >= make_timestamp_ns($start) AND ts < make_timestamp_ns($end)
  AND date >= $start_date::DATE AND date <= $end_date::DATE
ORDER BY ts
"""


def day(ns: int) -> str:
    """The UTC date of `ns` as YYYY-MM-DD (the store's day partitions)."""
    return datetime.fromtimestamp(ns // NS, UTC).date().isoformat()


def events(store: Queryable, start_ns: int, end_ns: int, host: str | None = None) -> pa.Table:
    """The event rows in [start_ns, end_ns) (`ts` as int ns), of one host when given."""
    sql = EVENTS_SQL
    params: dict[str, object] = {
        "start": start_ns,
        "end": end_ns,
        "start_date": day(start_ns),
        "end_date": day(end_ns),
    }
    if host is not None:
        sql = sql.replace("ORDER BY", "AND host = $host ORDER BY")
        params["host"] = host
    return store.query(sql, params)
