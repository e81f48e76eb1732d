"""The fields of a Kineto event that the analyses read, as msgspec types (pure).

A slice of `traceEvents` (a JSON array of event objects) is decoded into structs: only the fields
declared here become Python objects; every other field (and every other key of `args`) is skipped
in C. Four schemas, from the fastest to the most permissive (load.py tries them in turn):

* `KnownIntEvent`: `KnownEvent` with integer times (older Kineto's absolute µs), which become
  exact ns columns in one pass.
* `KnownEvent`: `TypedEvent` whose `ph` is a Chrome trace phase and whose `cat` is one of the
  categories Kineto writes (`KNOWN_CATEGORIES`); these decode to shared string objects, so they
  cost no allocation and are interned by identity.
* `TypedEvent`: each field has the type Kineto writes (ints for ids, strings for names, ...), so
  the column builder turns a field into a numpy column in one pass, without looking at each
  value's type. Nearly every slice of a real trace fits (its last events — the `Trace` spans,
  with string pids — usually do not).
* `TraceEvent`: any JSON value in any field; the column builder converts values one by one where
  their type is unexpected (a numeric-string pid, a float id, ...).

Each field's default is what `dict.get` gives the orjson path for an absent key (columns.py), so
every path feeds the same values. A slice whose values fit none (an element or `args` that is not
an object) raises `msgspec.ValidationError`, and load.py parses that slice with orjson instead
(as it does any slice msgspec rejects).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import msgspec

from gpulens.analyze.traces.model import MISSING

__all__ = [
    "ABSENT",
    "DECODERS",
    "KNOWN_CATEGORIES",
    "KNOWN_PHASES",
    "OCCUPANCY_ARG",
    "Args",
    "KnownEvent",
    "KnownIntEvent",
    "TraceEvent",
    "TypedArgs",
    "TypedEvent",
]

OCCUPANCY_ARG = "est. achieved occupancy %"
ABSENT: Any = msgspec.UNSET  # `ts` not written at all (distinct from `"ts": null`)
_NAN = float("nan")


class Args(msgspec.Struct, gc=False):
    """The keys of an event's `args` that are read (absent: the defaults below)."""

    name: Any = None  # metadata events: the process / thread name
    stream: Any = MISSING
    correlation: Any = MISSING
    external_id: Any = msgspec.field(default=MISSING, name="External id")
    occupancy: Any = msgspec.field(default=_NAN, name=OCCUPANCY_ARG)


class TraceEvent(msgspec.Struct, gc=False):
    """One element of `traceEvents`, reduced to the fields the loader reads."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = ABSENT
    dur: Any = None
    pid: Any = MISSING
    tid: Any = MISSING
    id: Any = MISSING
    args: Args | None = None


class TypedArgs(msgspec.Struct, gc=False):
    """`Args` with the types Kineto writes (an int occupancy is read as a float)."""

    name: str | None = None
    stream: int = MISSING
    correlation: int = MISSING
    external_id: int = msgspec.field(default=MISSING, name="External id")
    occupancy: float = msgspec.field(default=_NAN, name=OCCUPANCY_ARG)


class TypedEvent(msgspec.Struct, gc=False):
    """`TraceEvent` with the types Kineto writes: `int` ids may still exceed int64."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    ts: int | float | msgspec.UnsetType = ABSENT
    dur: int | float | None = None
    pid: int = MISSING
    tid: int = MISSING
    id: int = MISSING
    args: TypedArgs | None = None


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


class KnownEvent(TypedEvent, gc=False):
    """`TypedEvent` with a known phase and category (shared string objects)."""

    ph: Phase | None = None
    cat: Category | None = None


class KnownIntEvent(KnownEvent, gc=False):
    """`KnownEvent` whose times are integers (µs), as older Kineto writes them: exact as read."""

    ts: int | msgspec.UnsetType = ABSENT
    dur: int | None = None


KNOWN_PHASES: tuple[str, ...] = get_args(Phase)
KNOWN_CATEGORIES: tuple[str, ...] = get_args(Category)

# Tried in this order (load.py); each rejects what the next accepts.
DECODERS: tuple[msgspec.json.Decoder[Any], ...] = (
    msgspec.json.Decoder(list[KnownIntEvent]),
    msgspec.json.Decoder(list[KnownEvent]),
    msgspec.json.Decoder(list[TypedEvent]),
    msgspec.json.Decoder(list[TraceEvent]),
)
