"""A real agent (as `gpulens agent` composes it) whose NVML binding fails some calls, for
tests/integration/test_fault_matrix.py.

python agent_nvml_faults_worker.py <config.toml>

Host sim-node-0 of the simulated fleet, read by the real NVML collector through `FaultyBinding`:
the simulated binding, except that after `FAULT_AFTER_S` seconds GPU index 1 is lost on every
call, GPU 2's utilization times out, GPU 3 does not support power readings and GPU 4's memory
query fails with an unknown error (NVML's own return codes).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from gpulens.app import session
from gpulens.clock import SystemClock
from gpulens.collect.nvml.binding import NvmlError, NvmlGpuLost, NvmlNotSupported
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.config import load_config
from gpulens.present.cli_live import serve_agent

FAULT_AFTER_S = 3.0
NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_TIMEOUT, NVML_ERROR_GPU_IS_LOST = 3, 10, 15
NVML_ERROR_UNKNOWN = 999
#: GPU index -> (the call that fails, or "*" for every call; the error)
FAULTS: dict[int, tuple[str, NvmlError]] = {
    1: ("*", NvmlGpuLost("GPU is lost", NVML_ERROR_GPU_IS_LOST)),
    2: ("utilization", NvmlError("Timeout", NVML_ERROR_TIMEOUT)),
    3: ("power_usage_mw", NvmlNotSupported("Not Supported", NVML_ERROR_NOT_SUPPORTED)),
    4: ("memory_info", NvmlError("Unknown Error", NVML_ERROR_UNKNOWN)),
}


class FaultyBinding:
    """An NVML binding that delegates to `inner` and raises FAULTS once `after` has passed."""

    def __init__(self, inner: Any, after: float) -> None:
        self._inner = inner
        self._after = after
        self._by_uuid: dict[str, tuple[str, NvmlError]] = {}

    def init(self) -> None:
        self._inner.init()
        for index in range(self._inner.device_count()):
            if index in FAULTS:
                self._by_uuid[self._inner.device_info(index).uuid] = FAULTS[index]

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)
        if not callable(method):
            return method

        def call(*args: Any) -> Any:
            fault = self._by_uuid.get(args[0]) if args and isinstance(args[0], str) else None
            if fault is not None and time.monotonic() > self._after and fault[0] in ("*", name):
                raise fault[1]
            return method(*args)

        return call


def main() -> None:
    cfg = load_config(Path(sys.argv[1]))
    clock = SystemClock()
    fleet = session.simulated_fleet(cfg, clock.now_ns() - session.SIMULATED_HISTORY_NS)
    host = fleet.hosts[0]
    binding = FaultyBinding(fleet.binding(host, clock), time.monotonic() + FAULT_AFTER_S)
    nvml = NvmlCollector(binding, host, fleet.identity(host), name=f"nvml@{host}")  # type: ignore[arg-type]
    serve_agent(cfg, [nvml, fleet.host_collector(host)])


if __name__ == "__main__":
    main()
