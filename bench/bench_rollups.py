"""Rollup speed: `waste.annotate` + `rollups.rollup` over a synthetic classified interval frame.

python bench/bench_rollups.py [--quick] [--runs N]

Cases: 7 days × 64 GPUs at 60 s (645k rows) rolled up by user (target well under 1 s), and
30 days × 512 GPUs at 300 s (4.4M rows) by user, team, process and cluster (target well under
2 s). Times are the median of `--runs` runs; "annotate" is measured once per frame, "rollup"
on the annotated frame, "total" = annotate + rollup by user as a report would run them.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pyarrow as pa

from gpulens.analyze import rollups, waste
from gpulens.analyze.schema import STATES

MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S", "Tesla T4")


def make_frame(days: float, gpus: int, step_s: float, seed: int = 0) -> pa.Table:
    """A classified frame with plain string labels, nulls where GPUs are unallocated."""
    rng = np.random.default_rng(seed)
    buckets = int(days * 86400 / step_s)
    n = buckets * gpus
    start = np.repeat(np.arange(buckets, dtype=np.int64) * int(step_s * 1e9), gpus)
    gpu = np.tile(np.arange(gpus), buckets)
    host = gpu // 8
    state_code = rng.integers(0, len(STATES), n)
    allocated = STATES.index("idle_unallocated") != state_code
    user_code = np.where(allocated, rng.integers(0, 40, n), -1)

    def labels(codes: np.ndarray, names: list[str]) -> pa.Array:
        idx = pa.array(codes.astype(np.int32), mask=codes < 0)
        return pa.DictionaryArray.from_arrays(idx, pa.array(names)).cast(pa.string())

    def numbered(codes: np.ndarray, fmt: str) -> pa.Array:
        return labels(codes, [fmt.format(i) for i in range(int(codes.max()) + 1)])

    pid = np.where(allocated, 1000 + gpu * 7 + (start // int(86400e9)) % 5, -1)
    job = np.where(allocated, (gpu // 4) * 1000 + start // int(6 * 3600e9), -1)
    return pa.table(
        {
            "start_ns": start,
            "step_s": np.full(n, step_s),
            "host": numbered(host, "node{:03d}"),
            "gpu_uuid": numbered(gpu, "GPU-{:08x}"),
            "gpu_model": labels(host % len(MODELS), list(MODELS)),
            "pid": numbered(pid, "{}"),
            "user": numbered(user_code, "user{:02d}"),
            "team": numbered(np.where(user_code < 0, -1, user_code % 6), "team{}"),
            "job_id": numbered(job, "job{}"),
            "state": labels(state_code, list(STATES)),
            "useful_ratio": rng.random(n),
            "duty": rng.random(n),
            "sm_active": rng.random(n),
            "tensor_active": rng.random(n),
            "energy_j": rng.random(n) * 400 * step_s,
            "energy_power_j": rng.random(n) * 400 * step_s,
        }
    )


def timed(fn: object, runs: int) -> tuple[float, object]:
    times = []
    out = None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    cases: list[tuple[str, float, int, float, tuple[str, ...]]] = [
        ("7 d × 64 GPUs at 60 s", 7.0, 64, 60.0, ("user",))
    ]
    cases.append(
        ("30 d × 512 GPUs at 300 s", 30.0, 512, 300.0, ("user", "team", "process", "cluster"))
    )
    if args.quick:
        cases = [("1 d × 16 GPUs at 60 s", 1.0, 16, 60.0, ("user", "cluster"))]
    print("| frame | rows | annotate | rollup by | rollup | total (annotate + by user) |")
    print("|---|---|---|---|---|---|")
    for title, days, gpus, step, bys in cases:
        frame = make_frame(days, gpus, step)
        t_ann, annotated = timed(lambda f=frame: waste.annotate(f), args.runs)
        assert isinstance(annotated, pa.Table)
        for by in bys:
            t_roll, table = timed(lambda b=by, a=annotated: rollups.rollup(a, b), args.runs)
            assert isinstance(table, pa.Table) and table.num_rows > 0
            total = f"{t_ann + t_roll:.3f} s" if by == "user" else ""
            print(
                f"| {title} | {frame.num_rows:,} | {t_ann:.3f} s | {by} ({table.num_rows} groups)"
                f" | {t_roll:.3f} s | {total} |"
            )


if __name__ == "__main__":
    main()
