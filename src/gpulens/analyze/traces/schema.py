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

This module, and msgspec with it, is imported only for the first slice that the C scanner
(`_scan.c`) leaves to Python: a trace it reads whole starts without either.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gpulens.analyze.traces.event_fields import (
    ABSENT,
    KNOWN_CATEGORIES,
    KNOWN_PHASES,
    OCCUPANCY_ARG,
    Category,
    Phase,
)
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


class KnownEvent(TypedEvent, gc=False):
    """`TypedEvent` with a known phase and category (shared string objects)."""

    ph: Phase | None = None
    cat: Category | None = None


class KnownIntEvent(KnownEvent, gc=False):
    """`KnownEvent` whose times are integers (µs), as older Kineto writes them: exact as read."""

    ts: int | msgspec.UnsetType = ABSENT
    dur: int | None = None


# Tried in this order (load.py); each rejects what the next accepts.
DECODERS: tuple[msgspec.json.Decoder[Any], ...] = (
    msgspec.json.Decoder(list[KnownIntEvent]),
    msgspec.json.Decoder(list[KnownEvent]),
    msgspec.json.Decoder(list[TypedEvent]),
    msgspec.json.Decoder(list[TraceEvent]),
)
