"""A store whose report cards are known by construction (for the digest tests).

Five UTC days (2026-11-16 to 2026-11-20), one H100 per user on host `n1`, sampled every
60 s. Each user holds their GPU all day, every day, in one job: `HOURS[user][day]` is
(training hours, idle hours), training first (duty 95 %, SM 0.7, tensor 0.45, 40 GiB), then
idle (duty 0, SM 0, 20 GiB held); the rest of the day (none here: train + idle = 24) would be
free. Teams come from the holder's `team` label: alice and bob are `vision`, carol `nlp`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from gpulens.model import Kind
from gpulens.store import Commit, SegmentWriter

DAY_S = 86_400
FIRST_DAY_S = 1_794_787_200  # 2026-11-16T00:00:00Z, a Monday
DAYS = 5
STEP_S = 60
GIB = 2**30
PRICE = 3.0  # USD per H100 GPU-hour (cost.gpu_hour_prices)
TEAMS = {"alice": "vision", "bob": "vision", "carol": "nlp"}
#: user → per day (training hours, idle hours); the last day is the graded one
HOURS = {
    "alice": [(20, 4), (20, 4), (20, 4), (20, 4), (12, 12)],
    "bob": [(24, 0), (24, 0), (24, 0), (24, 0), (24, 0)],
    "carol": [(12, 12), (12, 12), (16, 8), (16, 8), (24, 0)],
}


def write_store(data_dir: Path) -> None:
    """The five days of `HOURS` into a store at `data_dir`."""
    gpu_parts, proc_parts = [], []
    for index, (user, days) in enumerate(HOURS.items()):
        uuid = f"GPU-0000000{index}-aaaa-bbbb-cccc-000000000000"
        for day, (train_h, _idle_h) in enumerate(days):
            t0 = FIRST_DAY_S + day * DAY_S
            ts = np.arange(t0, t0 + DAY_S, STEP_S, dtype=np.int64)
            training = ts < t0 + train_h * 3600
            n = len(ts)
            gpu_parts.append(
                pa.table(
                    {
                        "ts": ts * 1_000_000_000,
                        "host": ["n1"] * n,
                        "gpu_uuid": [uuid] * n,
                        "gpu_index": [str(index)] * n,
                        "gpu_model": ["NVIDIA H100 80GB HBM3"] * n,
                        "gpu_util_ratio": np.where(training, 0.95, 0.0),
                        "sm_active_ratio": np.where(training, 0.7, 0.0),
                        "tensor_active_ratio": np.where(training, 0.45, 0.0),
                        "dram_active_ratio": np.where(training, 0.35, 0.0),
                        "memory_used_bytes": np.where(training, 40.0, 20.0) * GIB,
                        "memory_total_bytes": np.full(n, 80.0 * GIB),
                        "power_watts": np.where(training, 560.0, 90.0),
                    }
                )
            )
            proc_parts.append(
                pa.table(
                    {
                        "ts": ts * 1_000_000_000,
                        "host": ["n1"] * n,
                        "gpu_uuid": [uuid] * n,
                        "pid": [str(1000 + index)] * n,
                        "job_id": [f"job-{user}"] * n,
                        "user": [user] * n,
                        "team": [TEAMS[user]] * n,
                        "process_memory_used_bytes": np.where(training, 40.0, 20.0) * GIB,
                    }
                )
            )
    with Commit(data_dir) as commit:
        writer = SegmentWriter(data_dir, "digest-test", commit=commit)
        writer.append_table(Kind.GPU, pa.concat_tables(gpu_parts))
        writer.append_table(Kind.PROCESS, pa.concat_tables(proc_parts))
        writer.close()
        commit.commit()


def write_openmetrics(path: Path) -> None:
    """The same history as dcgm-exporter series (sampled in the middle of each minute), the
    holder in `hpc_job`, `user` and `namespace` labels (the team as Kubernetes sees it)."""
    families = (
        ("DCGM_FI_DEV_GPU_UTIL", 95.0, 0.0),
        ("DCGM_FI_PROF_SM_ACTIVE", 0.7, 0.0),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.45, 0.0),
        ("DCGM_FI_DEV_FB_USED", 40960.0, 20480.0),
        ("DCGM_FI_DEV_POWER_USAGE", 560.0, 90.0),
    )
    with path.open("w", encoding="ascii") as out:
        for family, train, idle in families:
            out.write(f"# TYPE {family} gauge\n")
            for index, (user, days) in enumerate(HOURS.items()):
                labels = (
                    f'gpu="{index}",UUID="GPU-0000000{index}-aaaa-bbbb-cccc-000000000000",'
                    f'modelName="NVIDIA H100 80GB HBM3",Hostname="n1",hpc_job="job-{user}",'
                    f'user="{user}",namespace="{TEAMS[user]}"'
                )
                for day, (train_h, _idle_h) in enumerate(days):
                    t0 = FIRST_DAY_S + day * DAY_S
                    for t in range(t0 + STEP_S // 2, t0 + DAY_S, STEP_S):
                        value = train if t < t0 + train_h * 3600 else idle
                        out.write(f"{family}{{{labels}}} {value:g} {t}\n")
        out.write("# EOF\n")
