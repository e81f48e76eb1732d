"""Writer processes for tests/integration/test_store_s3.py (the store in a bucket).

python s3_store_worker.py agent <url> <host index> <seconds>
    one node of a three-node simulated fleet, as its agent would record it: the real NVML
    collector over the simulated binding plus the host collector, through the scheduler into a
    `SegmentWriter` on `<url>` (a segment a simulated minute), then compaction of this host's
    files; prints one JSON line with the rows it wrote and what compaction did.
python s3_store_worker.py upload <url> <rows>
    writes one large segment of incompressible values (a multipart upload), printing `ready`
    first; the test kills it while the upload is in flight.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pyarrow as pa

from gpulens.app import session
from gpulens.clock import PacedClock
from gpulens.config import load_config
from gpulens.model import Kind
from gpulens.pipeline.rates import RateStage
from gpulens.pipeline.scheduler import Scheduler
from gpulens.store import SegmentWriter, compact

# a past day (2025-11-24 12:00 UTC), so compaction merges whole partitions
START_NS = 1_763_985_600 * 1_000_000_000
HOSTS = 3
GPUS_PER_HOST = 2


def agent(url: str, index: int, seconds: float) -> None:
    cfg = load_config(
        overrides={
            "data_dir": url,
            "simulated.hosts": HOSTS,
            "simulated.gpus_per_host": GPUS_PER_HOST,
        }
    )
    clock = PacedClock(start_ns=START_NS, speed=math.inf)
    fleet = session.simulated_fleet(cfg, START_NS)
    host = fleet.hosts[index]
    # fleet_collectors gives each host's NVML collector, then its host collector
    every = session.fleet_collectors(fleet, clock)
    mine = every[2 * index : 2 * index + 2]
    for c in every:
        if c not in mine:
            c.close()
    writer = SegmentWriter(cfg.data_dir, host, flush_seconds=60.0, clock=clock)
    scheduler = Scheduler(mine, writer, clock, interval_s=1.0, rates=RateStage())
    try:
        scheduler.run(duration_s=seconds)
    finally:
        writer.close()
        for c in mine:
            c.close()
        scheduler.close()
    stats = writer.stats()
    done = compact(cfg.data_dir, host=host, min_age_seconds=0, delete_grace_seconds=0)
    print(
        json.dumps(
            {
                "host": host,
                "rows": stats.rows_written,
                "segments": stats.segments_written,
                "merged": done.files_merged,
                "compacted": [str(p) for p in done.written],
            }
        ),
        flush=True,
    )


def upload(url: str, rows: int) -> None:
    cfg = load_config(overrides={"data_dir": url})
    rng = np.random.default_rng(7)
    columns: dict[str, object] = {
        "ts": START_NS + np.arange(rows, dtype=np.int64) * 1_000_000,
        "host": ["killed-writer"] * rows,
        "gpu_uuid": ["GPU-killed"] * rows,
    }
    for i in range(6):  # unknown metrics are stored unrounded: random floats do not compress
        columns[f"noise_{i}"] = rng.random(rows)
    writer = SegmentWriter(cfg.data_dir, "killed-writer", flush_seconds=3600.0)
    writer.append_table(Kind.GPU, pa.table(columns))
    print("ready", flush=True)
    writer.flush()
    print("flushed", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "agent":
        agent(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif mode == "upload":
        upload(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
