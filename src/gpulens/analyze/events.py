"""Events attached to the frame windows they affect, so reports can annotate charts.

An event table has `ts` (int64 ns or timestamp), `event` (its name), `message`, and whatever
identity labels the source gave (`host`, `gpu_uuid`, `job_id`, ...). `categorise` maps an event
name and message to one of `CATEGORIES`; `attach_events` finds, per event, the frame rows of the
same host (and the same GPU and job when the event names them) within `window_ns` of the event
and returns one row per (event, GPU) with the bucket range.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gpulens.analyze._arrays import Ints, floats, ints, strings

CATEGORIES: tuple[str, ...] = (
    "job_start",
    "job_restart",
    "job_end",
    "deploy",
    "version",
    "version_change",
    "engine_build",
    "engine_build_failed",
    "engine_fallback",
    "oom",
    "xid",
    "gpu_lost",
    "energy_method",
    "other",
)

# Event names that announce a software version (first sight) or its change.
VERSION_EVENTS: frozenset[str] = frozenset(
    {
        "version",
        "version_change",
        "driver_version",
        "cuda_driver_version",
        "cuda_version",
        "nvml_version",
        "tensorrt_version",
        "cudnn_version",
        "nccl_version",
        "torch_version",
    }
)
_DIRECT = {"job_start", "job_restart", "job_end", "deploy", "xid", "gpu_lost", "energy_method"}


def categorise(name: str | None, message: str | None) -> str:
    """The category of an event from its name and message (see `CATEGORIES`)."""
    n, m = (name or "").lower(), (message or "").lower()
    if n == "oom" or "out of memory" in m or "out_of_memory" in n:
        return "oom"
    if n in _DIRECT:
        return n
    if n in VERSION_EVENTS or n.endswith("_version"):
        return "version_change" if ("changed" in m or n == "version_change") else "version"
    if "fallback" in n or "fell back" in m or "falling back" in m:
        return "engine_fallback"
    if n.startswith("engine_build") or "engine build" in m:
        return "engine_build_failed" if ("fail" in n or "fail" in m) else "engine_build"
    if n.startswith("xid"):
        return "xid"
    return "other"


ATTACH_SCHEMA = pa.schema(
    [
        ("event_index", pa.int64()),
        ("ts", pa.int64()),
        ("event", pa.string()),
        ("category", pa.string()),
        ("message", pa.string()),
        ("host", pa.string()),
        ("gpu_uuid", pa.string()),
        ("job_id", pa.string()),
        ("bucket_ns", pa.int64()),
        ("first_bucket_ns", pa.int64()),
        ("last_bucket_ns", pa.int64()),
        ("rows", pa.int64()),
    ]
)


def _by_host(frame: pa.Table) -> dict[str | None, tuple[Ints, Ints, int]]:
    """host → (row indices sorted by start_ns, their start_ns, the longest step in ns)."""
    start, step = ints(frame, "start_ns"), floats(frame, "step_s")
    hosts = strings(frame, "host")
    groups: dict[str | None, list[int]] = {}
    for i, h in enumerate(hosts):
        groups.setdefault(h, []).append(i)
    out: dict[str | None, tuple[Ints, Ints, int]] = {}
    for h, rows in groups.items():
        idx = np.asarray(rows, dtype=np.int64)
        idx = idx[np.argsort(start[idx], kind="stable")]
        longest = np.nan_to_num(step[idx], nan=0.0).max(initial=0.0)
        out[h] = (idx, start[idx], int(longest * 1e9))
    return out


def attach_events(
    frame: pa.Table, events: pa.Table, window_ns: int, before_ns: int | None = None
) -> pa.Table:
    """Per event and affected GPU: the frame buckets within [ts - before_ns, ts + window_ns).

    `before_ns` defaults to `window_ns`. An event matches rows of its `host` (all hosts when it
    has none), of its `gpu_uuid` and `job_id` when it carries them. `bucket_ns` is the start of
    the bucket holding `ts` on that GPU (null when the data has no such bucket). An event that
    matches no row still yields one row (gpu_uuid null) so it can be annotated.
    """
    before = window_ns if before_ns is None else before_ns
    n = events.num_rows
    if n == 0:
        return ATTACH_SCHEMA.empty_table()
    ts = ints(events, "ts")
    names, messages = strings(events, "event"), strings(events, "message")
    ev_host, ev_gpu, ev_job = (strings(events, c) for c in ("host", "gpu_uuid", "job_id"))
    start, step = ints(frame, "start_ns"), floats(frame, "step_s")
    f_gpu, f_job = strings(frame, "gpu_uuid"), strings(frame, "job_id")
    hosts = _by_host(frame)
    out: list[dict[str, object]] = []
    for e in range(n):
        t = int(ts[e])
        cands = [ev_host[e]] if ev_host[e] is not None else list(hosts)
        matched: dict[str | None, list[int]] = {}
        for h in cands:
            if h not in hosts:
                continue
            idx, st, longest = hosts[h]
            lo = int(np.searchsorted(st, t - before - longest, side="left"))
            hi = int(np.searchsorted(st, t + window_ns, side="left"))
            for i in idx[lo:hi].tolist():
                if start[i] + step[i] * 1e9 <= t - before:
                    continue
                if ev_gpu[e] is not None and f_gpu[i] != ev_gpu[e]:
                    continue
                if ev_job[e] is not None and f_job[i] != ev_job[e]:
                    continue
                matched.setdefault(f_gpu[i], []).append(i)
        base = {
            "event_index": e,
            "ts": t,
            "event": names[e],
            "category": categorise(names[e], messages[e]),
            "message": messages[e],
        }
        if not matched:
            out.append(
                {**base, "host": ev_host[e], "gpu_uuid": ev_gpu[e], "job_id": ev_job[e], "rows": 0}
            )
            continue
        hosts_of = strings(frame.take(pa.array([m[0] for m in matched.values()])), "host")
        for (gpu, rows), h in zip(matched.items(), hosts_of, strict=True):
            r = np.asarray(rows, dtype=np.int64)
            holding = r[(start[r] <= t) & (start[r] + step[r] * 1e9 > t)]
            jobs = [f_job[i] for i in rows if f_job[i] is not None]
            out.append(
                {
                    **base,
                    "host": h,
                    "gpu_uuid": gpu,
                    "job_id": ev_job[e] or (max(set(jobs), key=jobs.count) if jobs else None),
                    "bucket_ns": int(start[holding[0]]) if holding.size else None,
                    "first_bucket_ns": int(start[r].min()),
                    "last_bucket_ns": int(start[r].max()),
                    "rows": int(r.size),
                }
            )
    return pa.Table.from_pylist(out, schema=ATTACH_SCHEMA)
