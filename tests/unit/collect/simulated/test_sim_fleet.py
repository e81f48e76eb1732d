"""Placement, ground truth, the host collector and events."""

from __future__ import annotations

import json

import pytest

from conftest import Bind, S, gpm_window
from gpulens import catalog
from gpulens.collect.base import Collector
from gpulens.collect.simulated import SCENARIOS, STATES, SimulatedFleet
from gpulens.model import Kind


def test_a_big_enough_fleet_runs_all_nine_scenarios(fleet: SimulatedFleet) -> None:
    truth = fleet.ground_truth()
    assert {e["scenario"] for e in truth if e["job_id"]} == set(SCENARIOS)
    assert fleet.scenario_names() == SCENARIOS and fleet.unplaced == []
    held = [u for e in truth for u in e["gpu_uuids"]]
    assert len(held) == len(set(held)) == len(fleet.hosts) * 4
    healthy = next(e for e in truth if e["scenario"] == "healthy_training")
    assert len(healthy["gpu_uuids"]) == 4
    three = SimulatedFleet(hosts=3).ground_truth()
    assert {e["scenario"] for e in three if e["job_id"]} == set(SCENARIOS)


def test_the_fleet_never_grows() -> None:
    fleet = SimulatedFleet()
    assert fleet.hosts == ["sim-node-0", "sim-node-1"]
    truth = fleet.ground_truth()
    assert sum(len(e["gpu_uuids"]) for e in truth) == 8
    placed = {e["scenario"] for e in truth if e["job_id"]}
    assert {"healthy_training", "straggler_ddp", "eager_inference", "idle_allocated"} <= placed
    assert set(fleet.unplaced) == set(SCENARIOS) - placed and len(placed) == 6
    assert len(SimulatedFleet(hosts=1, gpus_per_host=8).ground_truth()) == 6
    assert len(SimulatedFleet(hosts=1, gpus_per_host=2).hosts) == 1
    with pytest.raises(ValueError, match="need"):
        SimulatedFleet(hosts=1, gpus_per_host=2, scenarios=["eager_inference"] * 3)


def test_single_scenario_fills_the_fleet() -> None:
    fleet = SimulatedFleet(scenarios=["idle_allocated"])
    truth = fleet.ground_truth()
    assert fleet.hosts == ["sim-node-0", "sim-node-1"]
    assert [e["scenario"] for e in truth] == ["idle_allocated"] * 8
    ddp = SimulatedFleet(hosts=2, gpus_per_host=4, scenarios=["straggler_ddp"]).ground_truth()
    assert [len(e["gpu_uuids"]) for e in ddp] == [4, 4]


def test_unallocated_gpus_and_unknown_names() -> None:
    fleet = SimulatedFleet(scenarios=["eager_inference", "tensorrt_inference"])
    states = [e["expected_state"] for e in fleet.ground_truth()]
    assert states.count("idle_unallocated") == 6
    with pytest.raises(ValueError, match="no_such_thing") as err:
        SimulatedFleet(scenarios=["no_such_thing"])
    assert "healthy_training" in str(err.value)
    with pytest.raises(ValueError, match="straggler_ddp"):
        SimulatedFleet(gpus_per_host=1, scenarios=["straggler_ddp"])
    small = SimulatedFleet(hosts=1, gpus_per_host=1).ground_truth()  # no room for DDP jobs
    assert [e["scenario"] for e in small] == ["input_bound_training"]
    pair = SimulatedFleet(hosts=1, gpus_per_host=2, scenarios=["straggler_ddp"]).ground_truth()
    assert len(pair[0]["gpu_uuids"]) == 2
    with pytest.raises(ValueError, match="unknown host"):
        fleet.binding("nope", fleet_clock())


def fleet_clock():  # type: ignore[no-untyped-def]
    from gpulens.clock import FakeClock

    return FakeClock()


def test_ground_truth_is_json_and_consistent(fleet: SimulatedFleet, bind: Bind) -> None:
    truth = fleet.ground_truth()
    assert json.loads(json.dumps(truth)) == truth
    for entry in truth:
        assert entry["expected_state"] in STATES
        if entry["job_id"] is None:
            continue
        start, end = entry["warmup"]
        assert entry["start_ns"] == start < end == entry["steady"][0]
        rules = [f["rule_id"] for f in entry["expected_findings"]]
        # the measured steady state agrees with the expected levels
        b, clock = bind(fleet, entry["host"], entry["steady"][0] + 200 * S)
        gpm = gpm_window(b, clock, entry["gpu_uuids"][0], 300)
        levels = entry["gpus"][0]["expected_levels"]
        assert gpm[2] / 100 == pytest.approx(levels["sm_active"], abs=0.03), entry["scenario"]
        assert gpm[5] / 100 == pytest.approx(levels["tensor_active"], abs=0.03)
        expected = {
            "healthy_training": [],
            "tensorrt_inference": [],
            "input_bound_training": ["input_bound"],
            "eager_inference": ["hollow_busy", "move_to_tensorrt"],
            "idle_allocated": ["idle_allocated"],
            "straggler_ddp": ["straggler"],
            "memory_leak": ["memory_leak"],
            "throttled": ["throttled"],
            "fp32_training": ["low_tensor_use"],
        }[entry["scenario"]]
        assert rules == expected
    straggler = next(e for e in truth if e["scenario"] == "straggler_ddp")
    slow = straggler["expected_findings"][0]["gpu_uuid"]
    assert slow in straggler["gpu_uuids"]
    assert [g["expected_state"] for g in straggler["gpus"]].count("comm_bound") == 3
    leak = next(e for e in truth if e["scenario"] == "memory_leak")["expected_findings"][0]
    assert leak["oom_at_ns"] > fleet.start_ns + 3600 * S


def test_host_collector_speaks_the_catalog(fleet: SimulatedFleet, bind: Bind) -> None:
    host = fleet.hosts[2]
    collector = fleet.host_collector(host)
    assert isinstance(collector, Collector) and collector.name == "simulated_host"
    seen: dict[Kind, set[str]] = {}
    previous: dict[str, float] = {}
    for k in range(600, 1200, 60):
        readings = collector.collect(fleet.start_ns + k * S)
        for r in readings:
            seen.setdefault(r.kind, set()).update(r.values)
            assert r.labels["host"] == host
            for name, value in r.values.items():
                assert catalog.get(name).kind is r.kind
                assert value == value  # not NaN
            if r.kind is Kind.HOST:
                for name, value in r.values.items():
                    if catalog.get(name).type == "counter":
                        assert value >= previous.get(name, 0.0)
                        previous[name] = value
            if r.kind is Kind.PROCESS:
                assert r.labels["pid"].isdigit() and r.labels["job_id"]
    assert {
        "host_cpu_util_ratio",
        "host_disk_read_bytes_total",
        "host_network_rx_bytes_total",
    } <= seen[Kind.HOST]
    assert {"process_cpu_seconds_total", "process_rss_bytes"} <= seen[Kind.PROCESS]
    assert {
        "app_samples_per_second",
        "app_latency_p99_seconds",
        "app_kernel_launches_per_second",
    } <= seen[Kind.APP]
    collector.close()


def test_events_mark_starts_deploys_and_oom() -> None:
    fleet = SimulatedFleet(scenarios=["tensorrt_inference", "memory_leak"])
    collector = fleet.host_collector(fleet.hosts[0])
    events = []
    now = fleet.start_ns
    for _ in range(40 * 12):  # 40 hours in 5-minute ticks
        now += 300 * S
        events.extend(r for r in collector.collect(now) if r.kind is Kind.EVENT)
    names = [e.labels["event"] for e in events]
    assert names.count("job_start") == 2 and "engine_build" in names and "deploy" in names
    assert names.count("oom") >= 4 and names.count("job_restart") >= 4
    assert all(e.labels["message"] for e in events)
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    leak = next(e for e in fleet.ground_truth() if e["scenario"] == "memory_leak")
    first_oom = next(e for e in events if e.labels["event"] == "oom")
    assert first_oom.ts == leak["expected_findings"][0]["oom_at_ns"]
    assert collector.collect(now) and not [
        r for r in collector.collect(now) if r.kind is Kind.EVENT
    ]
