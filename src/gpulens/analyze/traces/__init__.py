"""Profiler (Kineto) trace analysis: `load.load_trace` parses a trace's bytes or stream into a
columnar `Trace`; `breakdown` computes HTA's temporal and idle breakdowns (exactly, or in HTA's
window) and the device-level idle over all streams. Nothing here opens files: `gpulens.app.traces`
does, and hands the loader the stream."""

from __future__ import annotations

from gpulens.analyze.traces.model import EventTable, FlowTable, Trace

__all__ = ["EventTable", "FlowTable", "Trace"]
