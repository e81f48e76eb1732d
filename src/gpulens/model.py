"""The one vocabulary: a Reading is one observation of one entity at one time.

Timestamps are integer nanoseconds since the Unix epoch (UTC). Labels identify the entity
(host, GPU, process, job...). Values map a catalog metric name to a float in base units; a
metric a source could not measure is absent, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    "process_name",
    "user",
    "project",
    "team",
    "job_id",
    "container",
    "pod",
    "namespace",
    "engine",
    "source",
    "event",
    "message",
)

Labels = Mapping[str, str]

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
