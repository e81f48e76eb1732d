"""The file side of traces: directories listed, files opened and named, one job analysed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpulens.app.traces import analyze_files, load_trace_file, trace_files
from gpulens.errors import TraceFormatError


def _trace(path: Path) -> Path:
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": t, "dur": 10,
         "args": {"stream": 7, "correlation": t}}
        for t in (0, 100, 200)
    ]  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    return path


def test_trace_files_lists_the_trace_files_of_directories(tmp_path: Path) -> None:
    for name in ("b_rank1.json", "a_rank0.json.gz", "notes.txt"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "sub.json").mkdir()
    single = tmp_path / "x.json"
    found = trace_files([tmp_path, single])
    assert [Path(f).name for f in found] == ["a_rank0.json.gz", "b_rank1.json", "x.json"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TraceFormatError, match="no trace files"):
        trace_files([empty])
    with pytest.raises(TraceFormatError, match="no trace file given"):
        trace_files([])


def test_files_are_named_as_the_caller_says(tmp_path: Path) -> None:
    path = _trace(tmp_path / "tmp123.json")
    assert load_trace_file(path).source == str(path)
    trace = load_trace_file(path, name="uploads/job_rank_3.json")
    assert (trace.source, trace.file_name, trace.rank) == (
        "uploads/job_rank_3.json",
        "job_rank_3.json",
        3,
    )
    job = analyze_files([path], names=["mine.json"])
    assert [a.trace.source for a in job.analyses] == ["mine.json"]
    assert [r.file for r in job.cluster.rows] == ["mine.json"]
    bad = tmp_path / "tmp456.json"
    bad.write_bytes(b"{nope")
    with pytest.raises(TraceFormatError, match=r"^mine\.json: not valid JSON"):
        analyze_files([bad], names=["mine.json"])
    with pytest.raises(ValueError, match=r"shorter|longer"):
        analyze_files([path, bad], names=["one.json"])
