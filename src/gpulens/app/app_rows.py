"""Rows of the store's `app` and `event` tables in a window and a job/host scope: what the
in-process tracker and the serving wrapper wrote (the report's training and serving sections)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from gpulens.store.events import day
from gpulens.store.query import Queryable

#: the labels an app reading or event carries that a report may filter on
SCOPE = ("job_id", "host")


def out_of_scope(scope: Mapping[str, str]) -> bool:
    """Whether `scope` names a label (user, engine...) that app readings do not carry."""
    return any(v for k, v in scope.items() if k not in SCOPE)


def scoped_rows(
    store: Queryable,
    table: str,
    conditions: Sequence[str],
    start_ns: int | None = None,
    end_ns: int | None = None,
    scope: Mapping[str, str] | None = None,
) -> pa.Table:
    """The rows of `table` (`app` or `event`) meeting `conditions` (SQL, written by the caller)
    in [start_ns, end_ns) and `scope`, in time order (`ts` as int ns)."""
    where = list(conditions)
    params: dict[str, object] = {}
    if start_ns is not None:
        where.append("ts >= make_timestamp_ns($start) AND date >= $start_date::DATE")
        params.update(start=start_ns, start_date=day(start_ns))
    if end_ns is not None:
        where.append("ts < make_timestamp_ns($end) AND date <= $end_date::DATE")
        params.update(end=end_ns, end_date=day(end_ns))
    for i, key in enumerate(SCOPE):
        if scope and scope.get(key):
            where.append(f"{key} = $s{i}")
            params[f"s{i}"] = scope[key]
    sql = f"SELECT * EXCLUDE (ts, date), epoch_ns(ts) AS ts FROM {table}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return store.query(sql + " ORDER BY ts", params)
