"""The simulated fleet: hosts × GPUs running scenario jobs through a small physical model.

It plugs in where real sources do: `SimulatedBinding` is an NVML binding, `SimulatedIdentity`
a process-identity resolver, `SimulatedHostCollector` a Collector, so the real collector,
parse and pipeline code run in demos and tests. See docs/collectors/simulated.md.
"""

from gpulens.collect.simulated.binding import SimulatedBinding
from gpulens.collect.simulated.fleet import SimulatedFleet
from gpulens.collect.simulated.host import SimulatedHostCollector, SimulatedIdentity
from gpulens.collect.simulated.scenarios import SCENARIOS, STATES

__all__ = [
    "SCENARIOS",
    "STATES",
    "SimulatedBinding",
    "SimulatedFleet",
    "SimulatedHostCollector",
    "SimulatedIdentity",
]
