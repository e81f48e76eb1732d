"""Profiler (Kineto) trace analysis: `load.load_trace` reads a file into a columnar `Trace`;
`breakdown` computes HTA's temporal and idle breakdowns (exactly, or in HTA's window) and the
device-level idle over all streams. Only `load.py` reads files."""

from __future__ import annotations

from gpulens.analyze.traces.model import EventTable, FlowTable, Trace

__all__ = ["EventTable", "FlowTable", "Trace"]
