"""Profiles captured on demand: ask a tracked job for one, find what it wrote, analyse it, and
link the result to the finding that asked (docs/inference.md, profiling on demand).

The files live in the data dir (a local one), beside the store's tables:

- `profile-requests/<job>.json`: the request the job's trackers poll (torch/profile_on_demand.py);
- `profiles/<job>/<request id>/<host>-<pid>.pt.trace.json`: a process's Kineto trace, with its
  metadata `<host>-<pid>.json` (steps, run, rank, the finding that asked);
- `<host>-<pid>.result.json`: the analysis (app/traces.py, as `gpulens trace` runs it; the
  summary line from analyze/profiled.py), written once, read back after.

Automatic requests (`profile.auto`, off by default): an input_bound finding on a job asks for
one profile of that job, at most once per job (a marker `profile-requests/auto-<job>.done`) and
at most one request per `profile.auto_every_minutes` over all jobs (the time of the last one
in `profile-requests/auto-last`).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulens.analyze.profiled import profiled
from gpulens.config import Config
from gpulens.errors import ConfigError, GpulensError, StoreError
from gpulens.findings.model import Finding

REQUESTS_DIR = "profile-requests"
PROFILES_DIR = "profiles"
AUTO_RULES: frozenset[str] = frozenset({"input_bound"})
DEFAULT_TTL_S = 600.0
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str) -> str:
    """`name` as one file-name component (as the tracker writes it)."""
    return _SAFE.sub("_", name) or "_"


def local_dir(cfg: Config) -> Path:
    """The data dir as a local path; ConfigError for an object-store URL."""
    data_dir = cfg.data_dir
    if not isinstance(data_dir, Path):
        raise ConfigError(
            f"profiling on demand needs a data dir on a local file system, got {data_dir!s}: "
            "send the tracked process SIGUSR2 instead (its trace goes to the temporary directory)"
        )
    return data_dir


@dataclass(frozen=True, slots=True)
class Request:
    id: str
    job_id: str
    steps: int
    path: Path


def finding_ref(f: Finding) -> dict[str, Any]:
    """What a request keeps of the finding that asked: rule, subject, summary, window."""
    return {
        "rule_id": f.rule_id,
        "subject": dict(f.subject),
        "summary": f.summary,
        "window": list(f.window),
    }


def request(
    data_dir: Path,
    job: str,
    steps: int,
    finding: dict[str, Any] | None = None,
    ttl_s: float = DEFAULT_TTL_S,
    now_ns: int | None = None,
) -> Request:
    """Ask the tracked processes of `job` to profile `steps` steps (the request file replaced
    atomically; it expires after `ttl_s`)."""
    if steps < 1:
        raise ConfigError(f"--steps must be at least 1, got {steps}")
    now = time.time_ns() if now_ns is None else now_ns
    rid = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now / 1e9))}-{uuid.uuid4().hex[:8]}"
    folder = data_dir / REQUESTS_DIR
    path = folder / f"{safe_name(job)}.json"
    body = {
        "id": rid,
        "job_id": job,
        "steps": steps,
        "finding": finding,
        "requested_ns": now,
        "expires_ns": now + int(ttl_s * 1e9),
    }
    tmp = path.with_suffix(".tmp")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(body, indent=1), encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise StoreError(
            f"cannot write the profile request {str(path)!r} ({exc.strerror}): give a data "
            "dir this user can write, the tracked job's (--data-dir)"
        ) from None
    return Request(rid, job, steps, path)


def captures(data_dir: Path, job: str | None = None, request_id: str | None = None) -> list[Path]:
    """Metadata files of the captured profiles (of `job`, of one request), oldest first."""
    root = data_dir / PROFILES_DIR
    jobs = [root / safe_name(job)] if job else sorted(p for p in root.glob("*") if p.is_dir())
    out: list[Path] = []
    for folder in jobs:
        runs = [folder / safe_name(request_id)] if request_id else sorted(folder.glob("*"))
        for run in runs:
            out += [
                p
                for p in sorted(run.glob("*.json"))
                if not p.name.endswith((".result.json", ".trace.json"))
            ]
    return sorted(out, key=lambda p: p.stat().st_mtime_ns)


def wait_for(data_dir: Path, req: Request, timeout_s: float, poll_s: float = 0.5) -> list[Path]:
    """The captures of `req` once at least one is written (empty after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = captures(data_dir, req.job_id, req.id)
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(poll_s)


def analyse(meta_path: Path) -> dict[str, Any]:
    """The analysis of one capture (computed once and stored beside it): its metadata, the
    trace's path, the summary line and figures, and the trace findings' summaries."""
    result_path = meta_path.with_name(meta_path.stem + ".result.json")
    if result_path.exists():
        stored: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
        return stored
    from gpulens.app.traces import analyze_paths, load_trace_file

    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    trace_path = meta_path.with_name(str(meta["trace"]))
    job = analyze_paths([trace_path])
    rank = job.analyses[0]
    figures = profiled(load_trace_file(trace_path), rank.steps, rank.causes)
    result = {
        **meta,
        "trace_path": str(trace_path),
        "summary": figures.text(meta.get("first_step"), meta.get("last_step")),
        "device": figures.device,
        "device_idle_share": figures.device_idle_share,
        "loader_share": figures.loader_share,
        "step_seconds": figures.step_seconds,
        "profiled_steps": figures.steps,
        "trace_findings": [f.summary for f in job.findings],
    }
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1), encoding="utf-8")
    tmp.replace(result_path)
    return result


def results(data_dir: Path, job: str | None = None) -> list[dict[str, Any]]:
    """Every capture analysed (analysing those not analysed yet); one that cannot be is
    listed with its `error`."""
    return [analysed_or_error(meta) for meta in captures(data_dir, job)]


def analysed_or_error(meta: Path) -> dict[str, Any]:
    """`analyse(meta)`, or `{trace_path, error}` saying why the capture cannot be analysed."""
    try:
        return analyse(meta)
    except (GpulensError, OSError, ValueError, KeyError) as exc:
        return {"trace_path": str(meta), "error": f"{type(exc).__name__}: {exc}"}


def links(data_dir: Path, findings: Sequence[Finding]) -> dict[int, list[dict[str, Any]]]:
    """Per finding (its index in `findings`), the analysed profiles that finding asked for:
    same rule and job."""
    if not (data_dir / PROFILES_DIR).is_dir():
        return {}
    out: dict[int, list[dict[str, Any]]] = {}
    by_job: dict[str, list[dict[str, Any]]] = {}
    for i, f in enumerate(findings):
        job = f.subject.get("job_id")
        if not job:
            continue
        if job not in by_job:
            by_job[job] = results(data_dir, job)
        mine = [
            r
            for r in by_job[job]
            if (r.get("finding") or {}).get("rule_id") == f.rule_id and "error" not in r
        ]
        if mine:
            out[i] = mine
    return out


def auto_requests(
    cfg: Config, findings: Iterable[Finding], now_ns: int | None = None
) -> list[Request]:
    """Requests made for `findings` when `profile.auto` is on (see the module's docstring)."""
    if not cfg.get("profile.auto") or not isinstance(cfg.data_dir, Path):
        return []
    data_dir = cfg.data_dir
    now = time.time_ns() if now_ns is None else now_ns
    folder = data_dir / REQUESTS_DIR
    last = folder / "auto-last"
    every_ns = int(float(cfg.get("profile.auto_every_minutes")) * 60e9)
    for f in findings:
        job = f.subject.get("job_id")
        if f.rule_id not in AUTO_RULES or not job:
            continue
        done = folder / f"auto-{safe_name(job)}.done"
        if done.exists():
            continue
        if now - _last_auto(last) < every_ns:
            return []  # rate-limited: the next finding asks next time
        made = request(data_dir, job, int(cfg.get("profile.steps")), finding_ref(f), now_ns=now)
        done.write_text(made.id, encoding="utf-8")
        last.write_text(str(now), encoding="utf-8")
        return [made]
    return []


def _last_auto(path: Path) -> int:
    """When the last automatic request was made (ns; 0: never, or unreadable)."""
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return 0


def linked(cfg: Config, findings: Sequence[Finding]) -> list[dict[str, Any]]:
    """For a report: make the automatic requests `findings` call for (when `profile.auto` is
    on), then the analysed profiles linked to `findings`, each with the finding's index, rule
    and job. Nothing for an object-store data dir."""
    if not isinstance(cfg.data_dir, Path):
        return []
    auto_requests(cfg, findings)
    out = []
    for i, found in sorted(links(cfg.data_dir, findings).items()):
        f = findings[i]
        for r in found:
            out.append(
                {
                    "finding": i,
                    "rule_id": f.rule_id,
                    "job_id": f.subject.get("job_id"),
                    "summary": r.get("summary"),
                    "first_step": r.get("first_step"),
                    "last_step": r.get("last_step"),
                    "loader_share": r.get("loader_share"),
                    "device_idle_share": r.get("device_idle_share"),
                    "trace_path": r.get("trace_path"),
                }
            )
    return out
