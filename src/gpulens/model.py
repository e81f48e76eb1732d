"""The one vocabulary: a Reading is one observation of one entity at one time.

Timestamps are integer nanoseconds since the Unix epoch (UTC). Labels identify the entity
(host, GPU, process, job...). Values map a catalog metric name to a float in base units; a
metric a source could not measure is absent, never 0.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class Kind(StrEnum):
    """What a reading describes; each kind is stored in its own table."""

    GPU = "gpu"
    PROCESS = "process"
    HOST = "host"
    APP = "app"
    EVENT = "event"


# Who a GPU process belongs to: the labels a process identity resolver may give a pid
# (collect/procs, the simulated fleet), in the order tables store them. The one list: every
# other list of these labels is this one or a named subset below.
PROCESS_IDENTITY_LABELS: tuple[str, ...] = (
    "process_name",
    "user",
    "project",
    "team",
    "job_id",
    "container",
    "pod",
    "pod_uid",
    "namespace",
    "engine",
)
# Identity facts that are not attribution. `pod_uid` (from the cgroup path) is what joins a
# process to Kubernetes data, and the process table keeps it; but a pod is reported by
# `namespace` and `pod`, and a restarted pod keeps its name and gets a new UID: carried into the
# frames or onto exported series it would split one pod's history and start new series.
NOT_ATTRIBUTED: frozenset[str] = frozenset({"pod_uid"})
# The labels GPU time is attributed to: the frame's attribution columns (after `pid`), the
# `where` filters of the frame query, the labels of the exporter's process series, and the
# labels a process may declare itself (GPULENS_LABELS, `gpulens.io/<label>` pod labels).
ATTRIBUTION_LABELS: tuple[str, ...] = tuple(
    k for k in PROCESS_IDENTITY_LABELS if k not in NOT_ATTRIBUTED
)
# Who holds a GPU: the attribution a GPU row or GPU series carries (the live GPU rows, the
# exporter's GPU and waste series). `process_name` is the command of one process and stays on
# process series; the GPU is held by the job, user, pod or engine.
HOLDER_LABELS: tuple[str, ...] = tuple(k for k in ATTRIBUTION_LABELS if k != "process_name")

# Identity labels, in the order tables store them. Anything else a source knows goes into
# `Reading.labels` too, but these are the ones every layer may rely on.
LABEL_KEYS: tuple[str, ...] = (
    "host",
    "gpu_uuid",
    "gpu_index",
    "gpu_model",
    "mig_instance",
    "mig_profile",
    "parent_uuid",
    "pid",
    *PROCESS_IDENTITY_LABELS,
    "source",
    "event",
    "message",
)

Labels = Mapping[str, str]


class FrozenLabels(Mapping[str, str]):
    """An immutable labels mapping that sources build once per entity and reuse every tick.

    Besides being read like any mapping, it carries precomputed forms of itself that the hot
    path keys on: `identity` (frozenset of items, its hash cached by Python), `keys_tuple` and
    `values_tuple` (insertion order). Equal to any mapping with the same items.
    """

    __slots__ = ("_data", "identity", "keys_tuple", "values_tuple")

    def __init__(self, labels: Mapping[str, str]) -> None:
        data = dict(labels)
        self._data = data
        self.identity: frozenset[tuple[str, str]] = frozenset(data.items())
        self.keys_tuple: tuple[str, ...] = tuple(data)
        self.values_tuple: tuple[str, ...] = tuple(data.values())

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return self._data.get(key, default)

    def keys(self) -> KeysView[str]:
        return self._data.keys()

    def values(self) -> ValuesView[str]:
        return self._data.values()

    def items(self) -> ItemsView[str, str]:
        return self._data.items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenLabels):
            return self.identity == other.identity
        return self._data == other if isinstance(other, Mapping) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.identity)

    def __repr__(self) -> str:
        return f"FrozenLabels({self._data!r})"

    def __reduce__(self) -> tuple[type[FrozenLabels], tuple[dict[str, str]]]:
        return FrozenLabels, (self._data,)


_EMPTY: Mapping[str, str] = MappingProxyType({})
_EMPTY_VALUES: Mapping[str, float] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Reading:
    """One observation: `kind` of entity, `ts` in UTC nanoseconds, identity `labels`, `values`."""

    kind: Kind
    ts: int
    labels: Labels = field(default_factory=lambda: _EMPTY)
    values: Mapping[str, float] = field(default_factory=lambda: _EMPTY_VALUES)

    def __post_init__(self) -> None:
        if not isinstance(self.ts, int) or isinstance(self.ts, bool):
            raise TypeError(f"Reading.ts must be integer nanoseconds, got {self.ts!r}")

    def label(self, key: str, default: str = "") -> str:
        """The value of label `key`, or `default` when the source did not give it."""
        return self.labels.get(key, default)


def event(ts: int, name: str, message: str, labels: Labels | None = None) -> Reading:
    """An event reading (deploy, version change, engine fallback, GPU lost...)."""
    merged = dict(labels or {})
    merged["event"] = name
    merged["message"] = message
    return Reading(Kind.EVENT, ts, merged, {})
