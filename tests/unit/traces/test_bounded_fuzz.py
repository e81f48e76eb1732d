"""Fuzzing the Kineto JSON loader: whatever the bytes, it returns a Trace or raises one of
gpulens's typed errors (TraceFormatError, InputTooLarge), never anything else, on every load
path, in bounded time. Bounded in examples and time so that it takes seconds in CI."""

from __future__ import annotations

import gzip
import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulens.analyze.traces import load as load_module
from gpulens.analyze.traces.limits import TraceLimits
from gpulens.analyze.traces.load import load_trace
from gpulens.errors import InputTooLarge, TraceFormatError

LIMITS = TraceLimits(max_inflated_bytes=1 << 20, max_events=500, max_string_bytes=256)
FUZZ = settings(
    max_examples=int(os.environ.get("GPULENS_FUZZ_EXAMPLES", "120")),
    deadline=2000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
KEYS = ["ph", "cat", "name", "ts", "dur", "pid", "tid", "id", "args", "stream", "correlation",
        "External id", "traceEvents", "est. achieved occupancy %", "x"]  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.sampled_from(["X", "i", "M", "s", "f", "kernel", "cpu_op", "process_name", "1.5", "abc"]),
    st.text(max_size=20),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=6)
    ),
    max_leaves=20,
)
EVENTS = st.lists(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=8), max_size=12)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    """A trace-like JSON document, often damaged: cut, with a byte changed or inserted."""
    events = draw(EVENTS)
    shape = draw(st.sampled_from(["object", "array", "nested", "value"]))
    doc: Any
    if shape == "object":
        doc = {"schemaVersion": 1, "traceEvents": events, **draw(st.dictionaries(
            st.sampled_from(KEYS), VALUES, max_size=3))}  # fmt: skip
    elif shape == "array":
        doc = events
    elif shape == "nested":
        doc = {"outer": {"traceEvents": events}, "traceEvents": draw(EVENTS)}
    else:
        doc = draw(VALUES)
    text = json.dumps(doc, indent=draw(st.sampled_from([None, 0, 1]))).encode()
    damage = draw(st.sampled_from(["none", "cut", "byte", "insert", "depth"]))
    if text and damage == "cut":
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif text and damage in ("byte", "insert"):
        at = draw(st.integers(0, len(text) - 1))
        byte = bytes([draw(st.integers(0, 255))])
        text = text[:at] + byte + text[at + (damage == "byte") :]
    elif damage == "depth":
        deep = draw(st.integers(1, 3000))
        text = text.replace(b"[", b"[" + b"[" * deep, 1) + b"]" * deep
    return gzip.compress(text) if draw(st.booleans()) and draw(st.booleans()) else text


def _load_every_way(data: bytes, chunk: int | None, how: str) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(load_module, "_USE_SCANNER", how == "scanner")
        patch.setattr(load_module, "_USE_STRUCTS", how != "dicts")
        patch.setattr(load_module, "_STRUCTS_AFTER", 0)  # structs from the first slice
        try:
            load_trace(data, name="fuzz.json", chunk_bytes=chunk, limits=LIMITS)
        except (TraceFormatError, InputTooLarge) as exc:
            message = str(exc)
            assert message.startswith("fuzz.json: ") and "\n" not in message


CHUNKS = st.sampled_from([None, 1, 64, 4096, 1 << 19])
HOW = st.sampled_from(["scanner", "structs", "dicts"])


@FUZZ
@given(data=documents(), chunk=CHUNKS, how=HOW)
def test_trace_like_documents_load_or_raise_a_typed_error(
    data: bytes, chunk: int | None, how: str
) -> None:
    _load_every_way(data, chunk, how)


@FUZZ
@given(data=st.binary(max_size=4096), chunk=CHUNKS, how=HOW)
def test_any_bytes_load_or_raise_a_typed_error(data: bytes, chunk: int | None, how: str) -> None:
    _load_every_way(data, chunk, how)
