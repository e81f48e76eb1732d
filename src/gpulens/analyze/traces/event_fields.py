"""Names of a Kineto event's fields and values that the loader knows (pure, no dependency).

Shared by the column builder (columns.py) and the msgspec schemas (schema.py), which the loader
imports only when the C scanner leaves a slice to Python.
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args

__all__ = ["ABSENT", "KNOWN_CATEGORIES", "KNOWN_PHASES", "OCCUPANCY_ARG", "Category", "Phase"]

OCCUPANCY_ARG: Final = "est. achieved occupancy %"


class _Absent:
    """The type of `ABSENT`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()  # `ts` not written at all (distinct from `"ts": null`)

# Chrome trace event phases, and the categories of Kineto's activity types (libkineto
# ActivityType.cpp, 2021 names included), its flows and its `Trace` spans.
Phase = Literal[
    "X", "B", "E", "i", "I", "C", "M", "s", "t", "f", "b", "n", "e", "P", "N", "O", "D", "R",
    "c", "V", "v", "(", ")",
]  # fmt: skip
Category = Literal[
    "cpu_op", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset", "kernel",
    "external_correlation", "cuda_runtime", "cuda_driver", "cpu_instant_event",
    "python_function", "overhead", "mtia_runtime", "mtia_ccp_events", "mtia_insight",
    "mtia_counters", "cuda_sync", "cuda_event", "glow_runtime", "cuda_profiler_range", "hpu_op",
    "xpu_runtime", "xpu_driver", "mlu_runtime", "mlu_user_annotation", "collective_comm",
    "privateuse1_runtime", "privateuse1_driver", "ac2g", "async_cpu_to_gpu", "fwdbwd", "async",
    "Trace", "Kernel", "Memcpy", "Memset", "Runtime", "Operator", "Python", "gpu_user_Annotation",
]  # fmt: skip


KNOWN_PHASES: tuple[str, ...] = get_args(Phase)
KNOWN_CATEGORIES: tuple[str, ...] = get_args(Category)
