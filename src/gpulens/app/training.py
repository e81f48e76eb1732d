"""A report's training section: the app readings the framework wrote, per job, and the
findings they alone support (gpulens.torch and its callbacks: readings with `app_steps`).

The section lists every job with app readings in the report's window and scope (a job report:
that job). Jobs that also have GPU intervals get their findings from the telemetry rules (the
frames join the app readings on the job); the others get `findings.app`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze import training
from gpulens.analyze.efficiency import Thresholds
from gpulens.app.app_rows import out_of_scope, scoped_rows
from gpulens.findings import app as app_findings
from gpulens.findings.context import FindingThresholds
from gpulens.findings.model import Finding
from gpulens.store.query import Queryable


def app_readings(
    store: Queryable,
    start_ns: int | None = None,
    end_ns: int | None = None,
    scope: Mapping[str, str] | None = None,
) -> pa.Table:
    """The in-process trackers' app readings (those that count their steps) with a job, in
    [start_ns, end_ns) and `scope` (`ts` as int ns)."""
    conditions = ["job_id IS NOT NULL", "app_steps IS NOT NULL"]
    return scoped_rows(store, "app", conditions, start_ns, end_ns, scope)


def section(
    store: Queryable,
    start_ns: int | None,
    end_ns: int | None,
    scope: Mapping[str, str],
    step_s: float,
    gpu_frame: pa.Table,
    states: Thresholds | None = None,
    thresholds: FindingThresholds | None = None,
) -> tuple[list[dict[str, Any]], list[Finding]]:
    """(per-job training summaries, findings from app readings of jobs without GPU
    intervals). Scopes other than job and host (user, engine...) name telemetry
    attribution the app readings do not carry: the section is then empty."""
    if out_of_scope(scope):
        return [], []
    app = app_readings(store, start_ns, end_ns, scope)
    jobs = training.summaries(app)
    if not jobs:
        return [], []
    with_gpu: set[str] = set()
    if gpu_frame.num_rows and "job_id" in gpu_frame.column_names:
        with_gpu = {str(j) for j in pc.unique(gpu_frame["job_id"]).to_pylist() if j}
    for job in jobs:
        job["telemetry"] = job["job_id"] in with_gpu
    alone = [j["job_id"] for j in jobs if not j["telemetry"]]
    if not alone:
        return jobs, []
    mask = pc.is_in(app["job_id"].cast(pa.string()), pa.array(alone, pa.string()))
    intervals = training.wait_intervals(app.filter(mask), step_s)
    facts = {j["job_id"]: j for j in jobs}
    found = app_findings.input_bound(intervals, step_s, facts, states, thresholds)
    return jobs, found
