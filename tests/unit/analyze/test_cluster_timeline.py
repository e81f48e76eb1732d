"""A job table → per-minute allocation and pending demand, against a second-by-second count
done here."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from gpulens.analyze.cluster.timeline import jobs_to_sequence
from gpulens.cluster_schema import JOB_SCHEMA

T0 = 1_764_374_400
NAN = math.nan
# (queue, gpus, submit, start, end) in seconds after T0; NaN: never started / still running
JOBS = [
    ("a", 4, 0, 30, 150),
    ("a", 2, 10, NAN, NAN),  # waits to the end of the log
    ("a", 1, 20, NAN, 100),  # cancelled while pending
    ("b", 8, 45, 61, NAN),  # still running at the end
    ("b", 0.5, 5, 5, 179),
]
HORIZON = 180


def _table() -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"job_id": str(i), "queue": q, "gpus": g, "submit_s": T0 + s,
             "start_s": None if math.isnan(b) else T0 + b,
             "end_s": None if math.isnan(e) else T0 + e}
            for i, (q, g, s, b, e) in enumerate(JOBS)
        ],
        schema=JOB_SCHEMA,
    )  # fmt: skip


def _by_second(queue: str) -> tuple[list[float], list[float]]:
    in_use, pending = [], []
    for minute in range(HORIZON // 60):
        run = wait = 0.0
        for second in range(minute * 60, minute * 60 + 60):
            for q, g, s, b, e in JOBS:
                if q != queue:
                    continue
                end = HORIZON if math.isnan(e) else e
                if not math.isnan(b) and b <= second < end:
                    run += g
                wait_end = end if math.isnan(b) else b
                if s <= second < wait_end:
                    wait += g
        in_use.append(run / 60)
        pending.append(wait / 60)
    return in_use, pending


@pytest.mark.parametrize("queue", ["a", "b"])
def test_matches_a_count_by_second(queue: str) -> None:
    seq = jobs_to_sequence(_table(), 60, {"a": 8}, horizon_s=T0 + HORIZON)
    mine = seq.filter(pa.compute.equal(seq["queue"], queue))
    assert mine["ts_s"].to_pylist() == [T0, T0 + 60, T0 + 120]
    in_use, pending = _by_second(queue)
    assert np.allclose(mine["in_use_gpus"].to_numpy(), in_use)
    assert np.allclose(mine["pending_gpus"].to_numpy(), pending)
    totals = mine["total_gpus"].to_pylist()
    assert totals == ([8.0] * 3 if queue == "a" else [None] * 3)


def test_an_empty_log_is_an_error() -> None:
    with pytest.raises(ValueError, match="no jobs"):
        jobs_to_sequence(JOB_SCHEMA.empty_table())
