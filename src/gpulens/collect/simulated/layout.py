"""What the host side and the ground truth read of a placed fleet: its seed and start, hosts,
jobs, GPUs and events. A protocol, so that neither imports the fleet that builds them
(`SimulatedFleet` is the one implementation)."""

from __future__ import annotations

from typing import Protocol

from gpulens.collect.simulated.gpu import PlacedJob, SimGpu
from gpulens.model import Reading


class FleetLayout(Protocol):
    """A fleet with its jobs placed on its GPUs."""

    seed: int
    start_ns: int
    hosts: list[str]
    jobs: list[PlacedJob]

    def gpus(self, host: str) -> list[SimGpu]:
        """The simulated GPUs of `host`, by index."""
        ...

    def events(self, host: str, after_ns: int, until_ns: int) -> list[Reading]:
        """Job events on `host` with after_ns < ts <= until_ns, oldest first."""
        ...
