"""On a real NVIDIA GPU: the live state and the Prometheus exporter over real NVML ticks.

Skipped cleanly (see tests/conftest.py) where no GPU and driver are present.
"""

from __future__ import annotations

import time

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.analyze.schema import STATES
from gpulens.app.live import LiveState
from gpulens.clock import SystemClock
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.collect.nvml.pynvml_binding import PynvmlBinding
from gpulens.pipeline.rates import RateStage
from gpulens.pipeline.scheduler import Scheduler
from gpulens.pipeline.sinks import DiscardSink
from gpulens.present.prometheus import exporter

pytestmark = pytest.mark.gpu


def test_live_state_and_metrics_on_real_ticks() -> None:
    collector = NvmlCollector(PynvmlBinding(), host="gpu-test")
    scheduler = Scheduler([collector], DiscardSink(), SystemClock(), rates=RateStage())
    live = LiveState(state_window_s=5, keep_s=60)
    try:
        for _ in range(8):
            live.on_tick(scheduler.tick(time.time_ns()))
            time.sleep(1.0)
        live.refresh()
    finally:
        collector.close()
    snap = live.snapshot()
    count = PynvmlBinding()
    count.init()
    try:
        devices = count.device_count()
    finally:
        count.shutdown()
    assert len(snap.gpus) >= devices
    assert all(g.state in STATES for g in snap.gpus), [g.state for g in snap.gpus]
    text = generate_latest(exporter.registry(live.snapshot)).decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"gpulens_gpu_util_ratio", "gpulens_memory_used_bytes", "gpulens_gpu_state"} <= names
