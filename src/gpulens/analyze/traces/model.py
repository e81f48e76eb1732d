"""The columnar container of one loaded profiler trace (pure; built by `load.py`).

A `Trace` holds one numpy array per field for the timed events of a Kineto trace and one for its
flow events; strings (names, categories) are interned in lists and the arrays hold indices into
them. Times are integer nanoseconds exactly as the file wrote them (µs with up to 3 decimals ×
1000), relative to nothing: subtract `Trace.min_ts_ns` (or a job-wide minimum) to align ranks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from gpulens.analyze.traces.record import Record, field, record_fields

Ints = npt.NDArray[np.int64]
Codes = npt.NDArray[np.int32]
Bools = npt.NDArray[np.bool_]
Floats = npt.NDArray[np.float64]

MISSING = -1  # the value of an absent stream / correlation / external id / pid / tid

# Event phases kept in the event table (Chrome trace `ph`); metadata ("M") and flows go elsewhere.
PHASES = ("X", "i", "I", "C", "B", "E", "other")

# Categories whose events run on the accelerator (NVIDIA/AMD through Kineto, 2021 names, MTIA).
GPU_WORK_CATEGORIES = frozenset(
    {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "mtia_ccp_events"}
)
# Host-side calls that launch accelerator work and carry its `correlation`.
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "Runtime", "cuda_driver", "mtia_runtime"})


class EventTable(Record):
    """Timed events (every `ph` except metadata and flows), one array per field, file order.

    `index` is the event's position in `traceEvents` (as HTA numbers rows); `dur_ns` is 0 where the
    event has no `dur` (instants, counters), `has_dur` says which had one. `stream`, `correlation`
    and `external_id` come from `args` (absent → -1; a numeric string is read as its number);
    `occupancy` is the kernel's `est. achieved occupancy %` (NaN where the trace has none).
    """

    index: Ints
    ts_ns: Ints
    dur_ns: Ints
    has_dur: Bools
    phase: Codes  # index into PHASES
    category: Codes  # index into Trace.categories (-1: no `cat`)
    name: Codes  # index into Trace.names (-1: no `name`)
    pid: Ints  # -1 when not an integer (e.g. "Spans")
    tid: Ints  # -1 when not an integer
    stream: Ints
    correlation: Ints
    external_id: Ints
    occupancy: Floats

    def __len__(self) -> int:
        return int(self.ts_ns.shape[0])

    def take(self, rows: npt.NDArray[np.intp] | Bools) -> EventTable:
        """The rows selected by an index array or a boolean mask, as a new table."""
        return EventTable(**{name: getattr(self, name)[rows] for name in record_fields(EventTable)})


class FlowTable(Record):
    """Flow events (`ph` s / f / t): `id` links start and finish (for `ac2g`: the correlation)."""

    index: Ints
    ts_ns: Ints
    phase: Codes  # 0 = "s", 1 = "f", 2 = "t"
    category: Codes
    flow_id: Ints
    pid: Ints
    tid: Ints

    def __len__(self) -> int:
        return int(self.ts_ns.shape[0])


def base_name(name: str) -> str:
    """The last `/` part of a trace's name (`runs/rank_3.json` → `rank_3.json`); a pure string
    function, so names need not be paths of this machine."""
    return name.rstrip("/").rpartition("/")[2] or name


class Trace(Record):
    """One rank's profiler trace, loaded (see `gpulens.analyze.traces.load.load_trace`).

    `source` is the name the loader was given (a path, an upload's name); `names` is the table
    of event names.
    """

    source: str
    rank: int | None
    rank_source: str  # "distributedInfo", "file name", "argument" or "unknown"
    events: EventTable
    flows: FlowTable
    names: list[str]
    categories: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)  # top-level keys but traceEvents
    process_names: dict[int, str] = field(default_factory=dict)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    raw_event_count: int = 0

    @property
    def file_name(self) -> str:
        """`source`'s last `/` part: the file name shown."""
        return base_name(self.source)

    @property
    def distributed_info(self) -> dict[str, Any] | None:
        info = self.metadata.get("distributedInfo")
        return info if isinstance(info, dict) else None

    @property
    def device_properties(self) -> list[dict[str, Any]]:
        props = self.metadata.get("deviceProperties")
        return [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []

    @property
    def world_size(self) -> int | None:
        info = self.distributed_info
        size = info.get("world_size") if info else None
        return size if isinstance(size, int) else None

    @property
    def min_ts_ns(self) -> int | None:
        """Earliest timestamp of any timed event (HTA aligns ranks on this)."""
        return int(self.events.ts_ns.min()) if len(self.events) else None

    def category_mask(self, categories: frozenset[str] | set[str]) -> Bools:
        """Rows of `events` whose category is one of `categories`."""
        flags = np.zeros(len(self.categories) + 1, dtype=np.bool_)  # index -1 → False
        flags[[i for i, c in enumerate(self.categories) if c in categories]] = True
        return flags[self.events.category]

    def name_mask(self, wanted: list[bool] | Bools) -> Bools:
        """Rows whose name index is True in `wanted` (one flag per entry of `names`)."""
        flags = np.append(np.asarray(wanted, dtype=np.bool_), False)  # index -1 → False
        return flags[self.events.name]
