"""A short soak: `gpulens agent --speed` on 8 simulated GPUs for simulated hours under a steady
scrape and a dashboard viewer (bench/soak.py, which runs the full simulated day).

Open files must not grow and compaction must keep up: it runs on the simulated clock, so a
store that only ever gains segments fails here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from soak import run_soak, verdict

FLUSH_S = 60.0
COMPACT_AFTER_S = 60.0
KINDS = 5


@pytest.mark.slow
def test_a_short_soak_keeps_fds_and_segments_bounded(tmp_path: Path) -> None:
    soak = run_soak(
        tmp_path,
        gpus=8,
        hours=4.0,
        speed=1200.0,
        interval_s=60.0,
        flush_s=FLUSH_S,
        compact_after_s=COMPACT_AFTER_S,
        scrape_every_s=1.0,
        view_every_s=10.0,
        sample_every_s=1.0,
        wall_limit_s=40.0,
    )
    assert soak.exit_code == 0, soak.stderr[-2000:]
    assert not soak.failures, soak.failures[:5]
    v = verdict(soak, warmup_h=0.25)
    last = soak.samples[-1]
    assert v["sim_hours"] >= 0.25, f"only {v['sim_hours']:.2f} simulated hours in the time"
    assert v["fds_growth"] <= 2, f"open fds {v['fds_min']:.0f} -> {v['fds_max']:.0f}"
    # compaction runs on the simulated clock and deletes what it merged: without it every
    # flush would stay a segment of each kind
    written = KINDS * last.sim_h * 3600 / FLUSH_S
    assert last.segments <= written / 2, f"{last.segments} segments of {written:.0f} written"
