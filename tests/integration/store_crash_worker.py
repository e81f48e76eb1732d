"""A store writer or compactor process for tests/integration/test_store_crash.py (killed often).

python store_crash_worker.py write <data_dir> <run_id>
    appends 8 GPU readings per step (values `seq` 0, 1, 2, ...; label job_id=<run_id>),
    flushes every few steps and prints `flushed <max seq>` once each flush has returned.
python store_crash_worker.py compact <data_dir>
    compacts in a loop, deleting inputs at once.
python store_crash_worker.py retain <data_dir> <now_ns> <keep_days>
    applies retention once at `now_ns` (printing `ready` first, `done` after).
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpulens.clock import FakeClock
from gpulens.model import Kind, Reading
from gpulens.store import SegmentWriter, compact
from gpulens.store.retention import apply_retention

# a past day, so compaction merges whole partitions, compacted files included
BASE_NS = 1_764_000_000 * 1_000_000_000


def write(data_dir: Path, run_id: str) -> None:
    w = SegmentWriter(data_dir, f"crash-{run_id}", flush_seconds=0.01)
    print("ready", flush=True)
    seq = 0
    step = 0
    while True:
        batch = []
        for g in range(8):
            batch.append(
                Reading(
                    Kind.GPU,
                    BASE_NS + seq * 1_000_000 + int(run_id.split("-")[-1]),
                    {"host": "n1", "gpu_uuid": f"GPU-{g}", "job_id": run_id},
                    {"seq": float(seq), "sm_active_ratio": (seq % 100) / 100},
                )
            )
            seq += 1
        w.append(batch)
        step += 1
        if step % 3 == 0:
            w.flush()
            print(f"flushed {seq - 1}", flush=True)


def compact_forever(data_dir: Path) -> None:
    print("ready", flush=True)
    while True:
        compact(data_dir, min_age_seconds=0, delete_grace_seconds=0)


if __name__ == "__main__":
    mode, target = sys.argv[1], Path(sys.argv[2])
    if mode == "write":
        write(target, sys.argv[3])
    elif mode == "retain":
        print("ready", flush=True)
        apply_retention(target, int(sys.argv[4]), clock=FakeClock(int(sys.argv[3])))
        print("done", flush=True)
    else:
        compact_forever(target)
