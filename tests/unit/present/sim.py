"""Simulated ticks for the live front ends' tests: the real collectors over the simulated
fleet, through the real scheduler and rate stage, into a sink that keeps nothing."""

from __future__ import annotations

from collections.abc import Iterator

from gpulens.app import session
from gpulens.clock import FakeClock
from gpulens.collect.simulated import SimulatedFleet
from gpulens.pipeline.rates import RateStage
from gpulens.pipeline.scheduler import Scheduler, TickResult
from gpulens.pipeline.sinks import DiscardSink

NS = 1_000_000_000
START = 1_790_000_040 * NS  # on a whole minute


def fleet(**kw: object) -> SimulatedFleet:
    return SimulatedFleet(start_ns=START, **kw)  # type: ignore[arg-type]


def scheduler(sim: SimulatedFleet, clock: FakeClock) -> Scheduler:
    return Scheduler(session.fleet_collectors(sim, clock), DiscardSink(), clock, rates=RateStage())


def ticks(sim: SimulatedFleet, first_s: int, last_s: int) -> Iterator[TickResult]:
    """Ticks at START + first_s ... START + last_s - 1 seconds, one a second."""
    clock = FakeClock(START + first_s * NS)
    sched = scheduler(sim, clock)
    for s in range(first_s, last_s):
        now = START + s * NS
        clock.set(now)
        yield sched.tick(now)
