"""The value at time t depends only on (seed, t): not on call order, interval or history."""

from __future__ import annotations

from conftest import Bind, S
from gpulens.collect.nvml.binding import CLOCK_SM, PCIE_RX
from gpulens.collect.simulated import SimulatedBinding, SimulatedFleet


def _snapshot(b: SimulatedBinding, uuid: str) -> tuple[object, ...]:
    return (
        b.utilization(uuid),
        b.memory_info(uuid),
        b.power_usage_mw(uuid),
        b.total_energy_mj(uuid),
        b.temperature_c(uuid),
        b.clock_mhz(uuid, CLOCK_SM),
        b.clocks_event_reasons(uuid),
        b.pcie_throughput_kbps(uuid, PCIE_RX),
        tuple(b.compute_processes(uuid)),
    )


def _series(seed: int, host_index: int, times: list[int], bind: Bind) -> list[tuple[object, ...]]:
    fleet = SimulatedFleet(hosts=4, seed=seed)
    b, clock = bind(fleet, fleet.hosts[host_index], times[0])
    out = []
    for t in times:
        clock.set(t)
        out.extend(_snapshot(b, b.device_info(i).uuid) for i in range(b.device_count()))
    return out


def test_same_seed_same_values(bind: Bind) -> None:
    start = SimulatedFleet().start_ns
    times = [start + k * 37 * S for k in range(40)]
    for host in range(4):
        assert _series(3, host, times, bind) == _series(3, host, times, bind)


def test_different_seed_different_values(bind: Bind) -> None:
    start = SimulatedFleet().start_ns
    times = [start + 900 * S + k * S for k in range(20)]
    assert _series(1, 2, times, bind) != _series(2, 2, times, bind)


def test_value_at_t_ignores_query_order_and_interval(bind: Bind) -> None:
    fleet = SimulatedFleet(hosts=4, seed=11)
    host = fleet.hosts[3]
    targets = [fleet.start_ns + 400 * S + k * 250_000_000 for k in range(0, 200, 7)]
    b1, c1 = bind(fleet, host, targets[0])
    uuids = [b1.device_info(i).uuid for i in range(4)]
    forward = {}
    for t in targets:
        c1.set(t)
        forward[t] = [_snapshot(b1, u) for u in uuids]
    # A fresh fleet, asked at 100 ms ticks in between and in reverse order, agrees exactly.
    other = SimulatedFleet(hosts=4, seed=11)
    b2, c2 = bind(other, host, targets[0])
    for t in reversed(targets):
        c2.set(t - 100_000_000)
        [_snapshot(b2, u) for u in reversed(uuids)]
        c2.set(t)
        assert [_snapshot(b2, u) for u in uuids] == forward[t]


def test_gpm_window_is_independent_of_sampling(bind: Bind) -> None:
    fleet = SimulatedFleet(seed=5)
    b, clock = bind(fleet, fleet.hosts[0], fleet.start_ns + 1000 * S)
    uuid = b.device_info(1).uuid
    first = b.gpm_sample(uuid)
    clock.advance(10 * S + 123)
    end = b.gpm_sample(uuid)
    whole = b.gpm_metrics(first, end, [2, 5])
    # the same window asked again after other queries gives the same answer
    clock.advance(77 * S)
    b.utilization(uuid)
    assert b.gpm_metrics(first, end, [2, 5]) == whole
