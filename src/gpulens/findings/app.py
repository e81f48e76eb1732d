"""Findings from the framework's own timing alone (pure): for jobs with app readings and no GPU
telemetry, such as a run on a machine without a GPU or without the agent.

`input_bound` here is the telemetry rule's decision on the signal it already prefers: the
telemetry state calls an interval input-bound when the application's data wait is at least
`Thresholds.data_wait_high` (that decides where it is reported), and its finding needs a run of
such intervals lasting the rule's minimum duration, or covering all the job shows. The same
threshold, duration ladder, rule id, docs and fix apply here; the evidence says that the data
wait comes from the framework's timing (time blocked in the DataLoader iterator), not from GPU
activity. A job that also has GPU intervals is left to the telemetry rules (no duplicate).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from gpulens.analyze.efficiency import Thresholds
from gpulens.findings.context import FindingThresholds
from gpulens.findings.model import Evidence, Finding, Impact
from gpulens.findings.rules.input_bound import RULE_ID, advice
from gpulens.findings.runs import hours

NS = 1_000_000_000
SOURCE_NOTE = (
    "derived from the framework's timing (time blocked in the DataLoader iterator, "
    "gpulens.torch); no GPU telemetry for this job"
)


def _runs(starts: np.ndarray, hit: np.ndarray, step_ns: int) -> list[np.ndarray]:
    """Index runs of consecutive intervals (start `step_ns` apart) where `hit` holds."""
    out: list[np.ndarray] = []
    current: list[int] = []
    for i in range(starts.size):
        if hit[i] and current and starts[i] - starts[current[-1]] == step_ns:
            current.append(i)
            continue
        if current:
            out.append(np.array(current))
        current = [i] if hit[i] else []
    if current:
        out.append(np.array(current))
    return out


def input_bound(
    intervals: pa.Table,
    step_s: float,
    jobs: Mapping[str, Mapping[str, Any]] | None = None,
    states: Thresholds | None = None,
    thresholds: FindingThresholds | None = None,
) -> list[Finding]:
    """`input_bound` findings from `analyze.training.wait_intervals` rows. `jobs`: per job,
    its training summary (`analyze.training.job_summary`: GPUs, loader CPU for the evidence)."""
    th, ft = states or Thresholds(), thresholds or FindingThresholds()
    step_ns = int(step_s * NS)
    names = intervals["job_id"].to_pylist()
    starts_all = np.asarray(intervals["start_ns"].to_numpy(zero_copy_only=False), dtype=np.int64)
    wait_all = np.asarray(intervals["data_wait"].to_numpy(zero_copy_only=False), dtype=float)
    covered_all = np.asarray(intervals["covered_s"].to_numpy(zero_copy_only=False), dtype=float)
    out: list[Finding] = []
    for job in sorted(set(names)):
        rows = np.array([n == job for n in names])
        order = np.argsort(starts_all[rows], kind="stable")
        starts, wait = starts_all[rows][order], wait_all[rows][order]
        covered = np.minimum(covered_all[rows][order], step_s)
        hit = wait >= th.data_wait_high
        facts = (jobs or {}).get(job, {})
        for run in _runs(starts, hit, step_ns):
            duration = float(covered[run].sum())
            whole = ft.whole_window and run.size == starts.size
            if duration < ft.duration_for(RULE_ID) and not whole:
                continue
            share = float((wait[run] * covered[run]).sum() / duration) if duration else 0.0
            out.append(_finding(job, starts[run], share, duration, step_ns, facts, th, ft))
    return out


def _finding(
    job: str,
    starts: np.ndarray,
    share: float,
    duration_s: float,
    step_ns: int,
    facts: Mapping[str, Any],
    th: Thresholds,
    ft: FindingThresholds,
) -> Finding:
    gpus = len(facts.get("gpu_uuids") or [])
    evidence = [
        Evidence("data_wait", share, th.data_wait_high, ">=", SOURCE_NOTE),
        Evidence("step_seconds", _num(facts.get("step_seconds")), note="mean step time"),
    ]
    cpu = _num(facts.get("loader_cpu_ratio"))
    if not np.isnan(cpu):
        workers = _num(facts.get("loader_workers"))
        evidence.append(
            Evidence("loader_cpu_ratio", cpu, note=f"CPU busy share of {workers:.0f} workers")
        )
    subject = {"job_id": job, "source": "framework timing"}
    hosts = facts.get("hosts") or []
    if hosts:
        subject["host"] = ",".join(hosts)
    where = f"on {gpus} GPU(s)" if gpus else "with no GPU telemetry"
    return Finding(
        RULE_ID,
        ft.level(RULE_ID, duration_s),
        subject,
        (int(starts[0]), int(starts[-1]) + step_ns),
        f"input-bound for {_span(duration_s)} ({where}): the training loop waits for data "
        f"{share:.0%} of its step time, by the framework's own timing",
        tuple(evidence),
        Impact(wasted_gpu_hours=share * duration_s * gpus / 3600),
        advice(float("nan"), float("nan"), th.host_cpu_saturated),
        f"docs/findings/{RULE_ID}.md",
    )


def _span(seconds: float) -> str:
    """A run's length: seconds below a minute (a short tracked run), else as the rules say."""
    return f"{seconds:.0f} s" if seconds < 60 else hours(seconds)


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)
