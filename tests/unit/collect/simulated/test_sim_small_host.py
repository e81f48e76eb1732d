"""An input-bound job saturates the host CPU even alone on a small host."""

from __future__ import annotations

from conftest import S
from gpulens.collect.simulated import SimulatedFleet
from gpulens.model import Kind


def test_input_bound_alone_saturates_the_host_cpu() -> None:
    fleet = SimulatedFleet(hosts=1, gpus_per_host=1, scenarios=["input_bound_training"])
    job = fleet.ground_truth()[0]
    readings = fleet.host_collector(fleet.hosts[0]).collect(job["steady"][0] + 60 * S)
    host = next(r for r in readings if r.kind is Kind.HOST)
    assert host.values["host_cpu_util_ratio"] >= 0.95
    before = fleet.host_collector(fleet.hosts[0]).collect(job["start_ns"] - S)
    assert next(r for r in before if r.kind is Kind.HOST).values["host_cpu_util_ratio"] < 0.1
