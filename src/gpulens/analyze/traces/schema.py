"""The fields of a Kineto event that the analyses read, as msgspec types (pure).

`DECODER` parses one slice of `traceEvents` (a JSON array of event objects) into `TraceEvent`
structs: only the fields declared here become Python objects; every other field (and every other
key of `args`) is skipped in C. Each field's default is what `dict.get` gives the orjson path for
an absent key (columns.py), so both paths feed the same values. A slice whose values do not fit
these types (an element that is not an object, `args` that is not an object) raises
`msgspec.ValidationError`, and load.py parses that slice with orjson instead (as it does any slice
msgspec rejects).
"""

from __future__ import annotations

from typing import Any

import msgspec

from gpulens.analyze.traces.model import MISSING

__all__ = ["ABSENT", "DECODER", "OCCUPANCY_ARG", "Args", "TraceEvent"]

OCCUPANCY_ARG = "est. achieved occupancy %"
ABSENT: Any = msgspec.UNSET  # `ts` not written at all (distinct from `"ts": null`)


class Args(msgspec.Struct, gc=False):
    """The keys of an event's `args` that are read (absent: the defaults below)."""

    name: Any = None  # metadata events: the process / thread name
    stream: Any = MISSING
    correlation: Any = MISSING
    external_id: Any = msgspec.field(default=MISSING, name="External id")
    occupancy: Any = msgspec.field(default=float("nan"), name=OCCUPANCY_ARG)


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


DECODER = msgspec.json.Decoder(list[TraceEvent])
