"""A report's serving section: latency per engine from the serving process's own readings
(gpulens.torch.inference: app readings with `app_requests`), its engine fallbacks, the engine
choice by load, and the engine_migration findings they alone support.

Jobs that also have GPU intervals get engine_migration from the telemetry rule, which reads the
same measured latencies (`Context.latency`); the others get `findings.inference`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze import inference
from gpulens.analyze.inference import Objective
from gpulens.app.app_rows import out_of_scope, scoped_rows
from gpulens.findings.inference import measured_migration
from gpulens.findings.model import Finding
from gpulens.store.query import Queryable, QueryError

FALLBACK = "engine_fallback"


@dataclass
class Serving:
    """The serving section of a report."""

    latency: list[dict[str, Any]] = field(default_factory=list)
    engine_choice: list[dict[str, Any]] = field(default_factory=list)
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


def served_readings(
    store: Queryable,
    start_ns: int | None = None,
    end_ns: int | None = None,
    scope: Mapping[str, str] | None = None,
) -> pa.Table:
    """The serving wrappers' app readings (those with `app_requests`) in [start_ns, end_ns)
    and `scope` (`ts` as int ns)."""
    conditions = ["job_id IS NOT NULL", "app_requests IS NOT NULL"]
    return scoped_rows(store, "app", conditions, start_ns, end_ns, scope)


def fallbacks(
    store: Queryable,
    start_ns: int | None = None,
    end_ns: int | None = None,
    scope: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The engine_fallback events in the window and scope: ts (ns), job, engine, host, GPU,
    message."""
    try:
        table = scoped_rows(store, "event", [f"event = '{FALLBACK}'"], start_ns, end_ns, scope)
    except QueryError:  # a store without that label column (no event ever named a job)
        return []
    keys = ("ts", "job_id", "engine", "host", "gpu_uuid", "message")
    return [{k: r.get(k) for k in keys} for r in table.to_pylist()]


def section(
    store: Queryable,
    start_ns: int | None,
    end_ns: int | None,
    scope: Mapping[str, str],
    gpu_frame: pa.Table,
    objective: Objective | None = None,
) -> Serving:
    """The serving section; scopes other than job and host (user, engine...) name telemetry
    attribution the serving readings do not carry: the section is then empty."""
    if out_of_scope(scope):
        return Serving()
    app = served_readings(store, start_ns, end_ns, scope)
    out = Serving(fallbacks=fallbacks(store, start_ns, end_ns, scope))
    if app.num_rows == 0:
        return out
    out.latency = inference.latency_by_engine(app)
    out.engine_choice = inference.engine_choice(app, objective)
    with_gpu: set[str] = set()
    if gpu_frame.num_rows and "job_id" in gpu_frame.column_names:
        with_gpu = {str(j) for j in pc.unique(gpu_frame["job_id"]).to_pylist() if j}
    ts = app["ts"]
    window = (int(pc.min(ts).as_py()), int(pc.max(ts).as_py()))
    out.findings = measured_migration(out.latency, window, skip_jobs=with_gpu)
    return out
