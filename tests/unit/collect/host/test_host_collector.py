"""HostCollector with a psutil-shaped fake, the pure parse functions, and real psutil once."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import pytest
from host_fake import FakePsutil, cpu, pcputimes, pio, pmem, sdiskio

from gpulens import catalog
from gpulens.collect.base import Collector
from gpulens.collect.host import parse
from gpulens.collect.host.collector import HostCollector
from gpulens.model import Kind, Reading

NOW = 1_764_000_000 * 10**9


def by_label(readings: list[Reading], key: str) -> dict[str, Mapping[str, float]]:
    return {r.labels[key]: r.values for r in readings if key in r.labels and r.kind is Kind.HOST}


def host_values(readings: list[Reading]) -> Mapping[str, float]:
    (r,) = [r for r in readings if r.kind is Kind.HOST and dict(r.labels) == {"host": "n1"}]
    return r.values


def test_parse_cpu_ratios_from_deltas() -> None:
    prev, cur = cpu(100, 50, 800, 50), cpu(160, 70, 900, 70)  # +60 +20 busy, +100 idle, +20 io
    ratios = parse.cpu_ratios(prev, cur)
    assert ratios["host_cpu_util_ratio"] == pytest.approx(80 / 200)
    assert ratios["host_cpu_iowait_ratio"] == pytest.approx(20 / 200)
    assert parse.cpu_ratios(cur, cur) == {}
    assert parse.cpu_busy_seconds(cpu(10, 5, 100, 3)) == pytest.approx(15)


def test_parse_guest_time_is_not_double_counted() -> None:
    # guest time is already inside user: 10 s user of which 10 s guest, 10 s idle → 50 % busy.
    assert parse.cpu_ratios(cpu(0, 0, 0), cpu(10, 0, 10, guest=10))[
        "host_cpu_util_ratio"
    ] == pytest.approx(0.5)


def test_parse_ratio_is_clamped_when_idle_steps_back() -> None:
    r = parse.cpu_ratios(cpu(100, 0, 100), cpu(110, 0, 99))
    assert 0.0 <= r["host_cpu_util_ratio"] <= 1.0


def test_parse_memory_used_is_total_minus_available() -> None:
    class VM:
        total, available, used = 100.0, 30.0, 20.0

    assert parse.memory_values(VM()) == {
        "host_memory_total_bytes": 100.0,
        "host_memory_used_bytes": 70.0,
    }

    class NoAvailable:
        total, used = 100.0, 20.0

    assert parse.memory_values(NoAvailable())["host_memory_used_bytes"] == 20.0


def test_parse_whole_disks_drop_partitions() -> None:
    names = ["sda", "sda1", "nvme0n1", "nvme0n1p2", "mmcblk0", "mmcblk0p1", "dm-0", "md127"]
    assert parse.whole_disks(names) == ["sda", "nvme0n1", "mmcblk0", "dm-0", "md127"]
    # a partition whose disk is not listed (e.g. filtered) is kept
    assert parse.whole_disks(["sdb2"]) == ["sdb2"]


def test_parse_missing_sources_are_absent_not_zero() -> None:
    assert parse.load_values(None, None) == {}
    assert parse.disk_values(None) == {} and parse.network_values({}) == {}
    assert parse.process_cpu_values(object()) == {}


def test_collect_host_cores_disks_interfaces() -> None:
    ps = FakePsutil()
    c = HostCollector("n1", psutil_module=ps)
    assert isinstance(c, Collector) and c.name == "host"
    ps.total = cpu(190, 60, 930, 20)  # +90 user +10 system, +80 idle, +20 iowait → 200 s
    ps.percpu = [cpu(50, 25, 525), cpu(150, 25, 425)]  # core 0 idle, core 1 fully busy
    out = c.collect(NOW)
    assert all(r.ts == NOW for r in out)
    h = host_values(out)
    assert h["host_cpu_util_ratio"] == pytest.approx(0.5)
    assert h["host_cpu_iowait_ratio"] == pytest.approx(0.1)
    assert h["host_cpu_seconds_total"] == pytest.approx(250)
    assert h["host_cpu_count"] == 2 and h["host_load1"] == 3.5
    assert h["host_memory_used_bytes"] == 16 * 2**30
    assert by_label(out, "cpu") == {
        "0": {"host_cpu_util_ratio": 0.0},
        "1": {"host_cpu_util_ratio": 1.0},
    }
    disks = by_label(out, "device")
    assert set(disks) == {"sda", "nvme0n1"}  # partitions and loop devices left out
    assert disks["sda"] == {
        "host_disk_read_bytes_total": 4096,
        "host_disk_write_bytes_total": 8192,
        "host_disk_reads_total": 10,
        "host_disk_writes_total": 20,
    }
    assert by_label(out, "interface") == {
        "eth0": {"host_network_rx_bytes_total": 2000, "host_network_tx_bytes_total": 1000}
    }
    for r in out:
        for metric in r.values:
            assert catalog.get(metric).kind is r.kind


def test_counters_are_counters_so_the_rate_stage_can_use_them() -> None:
    pairs = catalog.rate_pairs()
    out = HostCollector("n1", psutil_module=FakePsutil()).collect(NOW)
    counters = {m for r in out for m in r.values if m.endswith("_total")}
    assert counters >= {"host_disk_read_bytes_total", "host_network_rx_bytes_total"}
    assert all(catalog.get(m).type == "counter" for m in counters)
    assert "host_disk_read_bytes_total" in pairs


def test_first_tick_without_cpu_change_leaves_ratios_out() -> None:
    out = HostCollector("n1", psutil_module=FakePsutil()).collect(NOW)
    assert "host_cpu_util_ratio" not in host_values(out)
    assert by_label(out, "cpu") == {}


def test_failing_section_is_counted_and_others_survive() -> None:
    ps = FakePsutil()
    c = HostCollector("n1", psutil_module=ps)
    ps.fail = {"disk_io_counters", "getloadavg"}
    out = c.collect(NOW)
    assert by_label(out, "device") == {} and "host_load1" not in host_values(out)
    assert "host_memory_total_bytes" in host_values(out)
    assert c.errors == {"disk": 1, "load": 1}


def test_gpu_processes_vanished_and_denied() -> None:
    ps = FakePsutil()
    ps.procs = {
        10: {"cpu": pcputimes(3.0, 1.5, 9, 9, 0), "mem": pmem(1 << 30, 0, 0, 0, 0, 0, 0),
             "io": pio(1, 2, 4096, 8192, 0, 0)},
        11: {"cpu": pcputimes(1.0, 0.0, 0, 0, 0), "mem": pmem(5, 0, 0, 0, 0, 0, 0),
             "io": ps.AccessDenied(11)},
        12: {"cpu": ps.NoSuchProcess(12), "mem": ps.NoSuchProcess(12), "io": ps.NoSuchProcess(12)},
    }  # fmt: skip
    c = HostCollector("n1", gpu_pids=lambda: [12, 10, 11, 13, 10], psutil_module=ps)
    procs = {r.labels["pid"]: r for r in c.collect(NOW) if r.kind is Kind.PROCESS}
    assert set(procs) == {"10", "11"}
    assert dict(procs["10"].labels) == {"host": "n1", "pid": "10"}
    assert procs["10"].values == {
        "process_cpu_seconds_total": 4.5,
        "process_rss_bytes": float(1 << 30),
        "process_read_bytes_total": 4096,
        "process_write_bytes_total": 8192,
    }
    assert "process_read_bytes_total" not in procs["11"].values
    assert c.skipped_processes == 2 and c.errors == {}


def test_identity_labels_are_attached_when_given() -> None:
    ps = FakePsutil()
    ps.procs = {10: {"cpu": pcputimes(1, 1, 0, 0, 0), "mem": pmem(1, 0, 0, 0, 0, 0, 0), "io": None}}

    class Ident:
        def identify(self, pid: int) -> Mapping[str, str]:
            return {"user": "alice", "host": "spoofed"}

    c = HostCollector("n1", gpu_pids=lambda: [10], psutil_module=ps, identity=Ident())
    (r,) = [r for r in c.collect(NOW) if r.kind is Kind.PROCESS]
    assert dict(r.labels) == {"host": "n1", "pid": "10", "user": "alice"}


def test_skip_patterns_are_configurable() -> None:
    ps = FakePsutil()
    ps.disks = {"loop0": sdiskio(1, 1, 1, 1, 0, 0)}
    c = HostCollector("n1", psutil_module=ps, skip_disks=(), skip_interfaces=("lo", "eth*"))
    out = c.collect(NOW)
    assert set(by_label(out, "device")) == {"loop0"} and by_label(out, "interface") == {}


def test_real_psutil_smoke() -> None:
    pytest.importorskip("psutil")
    c = HostCollector("real", gpu_pids=lambda: [os.getpid()])
    deadline = time.monotonic() + 0.05  # > 1 jiffy of CPU time, so the deltas are non-zero
    while time.monotonic() < deadline:
        pass
    out = c.collect(NOW)
    h: Any = next(r.values for r in out if dict(r.labels) == {"host": "real"})
    assert 0.0 <= h["host_cpu_util_ratio"] <= 1.0
    assert h["host_cpu_count"] >= 1
    assert 0 < h["host_memory_used_bytes"] <= h["host_memory_total_bytes"]
    assert all(0.0 <= v["host_cpu_util_ratio"] <= 1.0 for v in by_label(out, "cpu").values())
    (me,) = [r for r in out if r.kind is Kind.PROCESS]
    assert me.labels["pid"] == str(os.getpid())
    assert me.values["process_rss_bytes"] > 10 * 2**20
    assert me.values["process_cpu_seconds_total"] > 0
    c.close()
