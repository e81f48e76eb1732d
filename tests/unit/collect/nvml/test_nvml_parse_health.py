"""Pure parse of the health, video-engine, NVLink and process-merge values."""

from __future__ import annotations

import math

from gpulens import catalog
from gpulens.collect.nvml import parse
from gpulens.collect.nvml.binding import NvlinkCounters, ProcessInfo, RemappedRows


def test_engine_utilisation_percent_to_ratio() -> None:
    assert parse.util_ratio(67) == 0.67
    assert parse.util_ratio(0) == 0.0
    assert parse.util_ratio(-1) is None and parse.util_ratio(math.nan) is None


def test_memory_temperature_zero_is_no_sensor() -> None:
    assert parse.memory_temperature_celsius(71) == 71.0
    assert parse.memory_temperature_celsius(0) is None
    assert parse.memory_temperature_celsius(-5) is None


def test_power_limit_and_counts() -> None:
    assert parse.power_limit_watts(450_000) == 450.0
    assert parse.power_limit_watts(0) is None
    assert parse.count_total(0) == 0.0 and parse.count_total(7) == 7.0
    assert parse.count_total(-1) is None


def test_remapped_rows_values() -> None:
    values = parse.remapped_rows_values(RemappedRows(3, 1, pending=False, failure=True))
    assert values == {
        "remapped_rows_correctable_total": 3.0,
        "remapped_rows_uncorrectable_total": 1.0,
        "row_remap_pending": 0.0,
        "row_remap_failure": 1.0,
    }


def test_nvlink_kib_counters_to_bytes() -> None:
    assert parse.nvlink_values(NvlinkCounters(2, 3)) == {
        "nvlink_tx_bytes_total": 2048.0,
        "nvlink_rx_bytes_total": 3072.0,
    }


def test_nvlink_counters_rate_into_the_existing_gauges() -> None:
    pairs = catalog.rate_pairs()
    assert pairs["nvlink_tx_bytes_total"] == "nvlink_tx_bytes_per_second"
    assert pairs["nvlink_rx_bytes_total"] == "nvlink_rx_bytes_per_second"


def test_every_capability_metric_is_in_the_catalog() -> None:
    for metrics in parse.CAPABILITY_METRICS.values():
        for name in metrics:
            assert name in catalog.METRICS, name


def test_merge_processes_per_pid() -> None:
    compute = [ProcessInfo(1, 100, gpu_instance_id=None), ProcessInfo(2, None)]
    graphics = [ProcessInfo(2, 50, gpu_instance_id=3, name="Xorg"), ProcessInfo(1, 80)]
    merged = parse.merge_processes(compute, graphics)
    assert [p.pid for p in merged] == [1, 2]
    assert merged[0].used_gpu_memory == 100  # the larger value, not 180
    assert merged[1].used_gpu_memory == 50  # None yields to a known value
    assert merged[1].gpu_instance_id == 3 and merged[1].name == "Xorg"
    assert parse.merge_processes([], []) == []
