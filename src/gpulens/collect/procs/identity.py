"""The ProcessIdentity protocol: who a GPU process belongs to.

NVML gives host-namespace PIDs and nothing else. An identity resolver turns a PID into the
labels that make a GPU-second attributable: `gpulens.model.PROCESS_IDENTITY_LABELS`
(`process_name`, `user`, `project`, `team`, `job_id`, `container`, `pod`, `pod_uid`,
`namespace`, `engine`). The real resolver reads /proc (cgroups, environment, command line);
the simulated fleet answers from its scenarios.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable


@runtime_checkable
class ProcessIdentity(Protocol):
    """Maps a host PID to identity labels; unknown facts are left out, never guessed."""

    def identify(self, pid: int) -> Mapping[str, str]: ...


class NoIdentity:
    """A resolver that knows nothing (labels stay empty)."""

    def identify(self, pid: int) -> Mapping[str, str]:
        return {}
