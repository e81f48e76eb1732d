"""Energy and violation counters: monotonic, and consistent with power and caps."""

from __future__ import annotations

import itertools

import pytest

from conftest import Bind, S
from gpulens.collect.nvml.binding import PERF_POLICY_POWER, PERF_POLICY_THERMAL
from gpulens.collect.simulated import SCENARIOS, SimulatedFleet


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_energy_is_monotonic_and_integrates_power(
    fleet: SimulatedFleet, bind: Bind, truth: dict, scenario: str
) -> None:
    job = truth[scenario]
    uuid = job["gpu_uuids"][0]
    b, clock = bind(fleet, job["host"], job["start_ns"] - 30 * S)
    energy = [b.total_energy_mj(uuid)]
    integral_mj = 0.0
    for _ in range(900):  # 15 minutes across the job start and the warm-up
        clock.advance(S)
        integral_mj += b.power_usage_mw(uuid)  # 1 s average power × 1 s
        energy.append(b.total_energy_mj(uuid))
    assert all(b >= a for a, b in itertools.pairwise(energy))
    assert energy[-1] - energy[0] == pytest.approx(integral_mj, rel=0.03)


def test_counters_only_grow_when_throttled(fleet: SimulatedFleet, bind: Bind, truth: dict) -> None:
    for scenario in ("healthy_training", "fp32_training", "idle_allocated"):
        job = truth[scenario]
        b, clock = bind(fleet, job["host"], job["steady"][0] + 60 * S)
        uuid = job["gpu_uuids"][0]
        before = [b.violation_time_ns(uuid, p) for p in (PERF_POLICY_POWER, PERF_POLICY_THERMAL)]
        clock.advance(3600 * S)
        after = [b.violation_time_ns(uuid, p) for p in (PERF_POLICY_POWER, PERF_POLICY_THERMAL)]
        assert before == after == [0, 0], scenario


def test_power_stays_within_the_limit(fleet: SimulatedFleet, bind: Bind, truth: dict) -> None:
    for scenario in SCENARIOS:
        job = truth[scenario]
        b, clock = bind(fleet, job["host"], job["start_ns"])
        for _ in range(120):
            clock.advance(7 * S)
            for uuid in job["gpu_uuids"]:
                assert 60_000 <= b.power_usage_mw(uuid) <= 700_000 * 1.02, scenario


def test_temperature_lags_power(fleet: SimulatedFleet, bind: Bind, truth: dict) -> None:
    job = truth["fp32_training"]
    uuid = job["gpu_uuids"][0]
    b, clock = bind(fleet, job["host"], job["steady"][0])
    temps = []
    for _ in range(10):
        temps.append(b.temperature_c(uuid))
        clock.advance(30 * S)
    assert temps[-1] > temps[0] + 10  # heats up over minutes, not instantly
    assert temps[-1] - temps[-2] < temps[1] - temps[0] + 1  # and approaches an equilibrium
