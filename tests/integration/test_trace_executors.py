"""`gpulens trace --executor`: in process and on a local process pool, every multi-rank job of
the stored real traces gives the report JSON of the single-process analysis of the fully
loaded traces, byte for byte; a rank that cannot be parsed is listed and the others complete;
the per-rank summary is small; bad `--executor` values give one clear error.

The Dask executor has its own module (test_trace_executors_dask.py).
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from trace_executor_cases import (
    HTA,
    TRACES,
    cases,
    multi_rank_files,
    reference_json,
    reference_reports,
    reports,
)

from gpulens.app.trace_executors import POOL_MIN_BYTES, LocalExecutor, ProcessExecutor, executor
from gpulens.app.trace_rank import RankTask, analyse_rank
from gpulens.app.trace_summary import KEPT_GAPS
from gpulens.app.traces import analyze_files, trace_files, trace_limits
from gpulens.errors import ConfigError, TraceFormatError
from gpulens.present.reports.trace import MAX_TIMELINE_GAPS, build_view, to_json, to_terminal

CASES = ("pair", "pair_hta_window", "every_multi_rank_file", "every_multi_rank_file_hta_window")
CASES += ("one_step_rank_in_window_job",)


@pytest.fixture(scope="module")
def references(shared: Path) -> dict[str, tuple[str, str]]:
    """Per case, the single-process report: JSON and HTML."""
    return {
        name: reference_reports(files, window) for name, (files, window) in cases(shared).items()
    }


def test_the_cases_are_multi_rank_jobs(
    shared: Path, references: dict[str, tuple[str, str]]
) -> None:
    files = multi_rank_files(shared)
    assert len(files) == 8 and len({f.name for f in files}) == 8
    every = json.loads(references["every_multi_rank_file"][0])
    assert [r["world_size"] for r in [every["cluster"]]] == [128]  # the largest job's
    assert len(every["ranks"]) == 8 and every["failed_ranks"] == []
    # HTA's window: the one-step rank is windowed only because its job has several names
    windowed = json.loads(references["one_step_rank_in_window_job"][0])
    alone = json.loads(reference_json([cases(shared)["one_step_rank_in_window_job"][0][0]], True))
    assert windowed["ranks"][0]["notes"] != alone["ranks"][0]["notes"]


@pytest.mark.parametrize("spec", ["local", "processes:2"])
@pytest.mark.parametrize("case", CASES)
def test_executor_equals_single_process(
    shared: Path, references: dict[str, tuple[str, str]], case: str, spec: str
) -> None:
    files, window = cases(shared)[case]
    job = analyze_files(files, hta_window=window, executor=executor(spec, len(files)))
    assert reports(job) == references[case]


def test_summaries_keep_the_gaps_the_report_reads(shared: Path) -> None:
    """A rank's summary keeps the count of its idle gaps and the longest `KEPT_GAPS`, at least
    as many as the report's timeline draws (the HTML equals the single-process one above, on
    ranks with ~22k gaps)."""
    assert KEPT_GAPS >= MAX_TIMELINE_GAPS
    path = shared / TRACES / HTA / "df_index_resolver/df_index_resolver.json.gz"
    outcome = analyse_rank(RankTask(0, str(path), str(path), trace_limits()))
    assert outcome.analysis is not None
    gaps = outcome.analysis.causes.gaps
    assert len(gaps) > 20_000 and gaps.start_ns.size == KEPT_GAPS
    assert outcome.analysis.causes.to_dict(0)["gaps"] == len(gaps)


def test_the_default_picks_by_file_count_and_size() -> None:
    assert isinstance(executor(None, 1), LocalExecutor)
    pool = executor(None, 64)
    assert isinstance(pool, ProcessExecutor) and 1 <= pool.workers <= (os.cpu_count() or 1)
    assert executor(None, 64, 1 << 30) == pool
    assert executor(None, 64, POOL_MIN_BYTES - 1) == LocalExecutor()  # a pool costs more
    assert executor("processes:3", 1) == ProcessExecutor(3)
    assert executor("local", 64) == LocalExecutor()


def _bad_ranks(tmp: Path, shared: Path) -> dict[str, Path]:
    """A rank file cut inside its events, and a real rank's gzip cut before its end."""
    (tmp / "not_json.json").write_text('{"traceEvents": [{"ph": "X", "ts": ', encoding="utf-8")
    real = gzip.decompress(multi_rank_files(shared)[0].read_bytes())[:50_000]
    (tmp / "truncated.json.gz").write_bytes(gzip.compress(real)[:-200])
    return {"not_json": tmp / "not_json.json", "truncated": tmp / "truncated.json.gz"}


@pytest.mark.parametrize("spec", ["local", "processes:2"])
def test_a_rank_that_fails_is_listed_and_the_others_complete(
    shared: Path, tmp_path: Path, spec: str
) -> None:
    pair = cases(shared)["pair"][0]
    bad = _bad_ranks(tmp_path, shared)
    files = [pair[0], bad["not_json"], pair[1], bad["truncated"]]
    job = analyze_files(files, executor=executor(spec, len(files)))
    doc = json.loads(to_json(build_view(job)))
    failed = doc.pop("failed_ranks")
    assert [(f["position"], f["file"], f["error_type"]) for f in failed] == [
        (1, str(bad["not_json"]), "TraceFormatError"),
        (3, str(bad["truncated"]), "TraceFormatError"),
    ]
    assert all(f["error"].startswith(f["file"] + ": ") for f in failed)
    assert "truncated gzip" in failed[1]["error"]
    # the good ranks are analysed exactly as a job of them alone
    alone = json.loads(reference_json(pair, False))
    assert alone.pop("failed_ranks") == []
    assert doc == alone
    text = to_terminal(build_view(job))
    assert "Failed ranks (2)" in text and "truncated gzip" in text


def test_no_rank_analysed_raises_the_error(shared: Path, tmp_path: Path) -> None:
    bad = _bad_ranks(tmp_path, shared)
    with pytest.raises(TraceFormatError, match="truncated gzip"):
        analyze_files([bad["truncated"]])
    with pytest.raises(TraceFormatError, match="none of the 2 trace files could be analysed"):
        analyze_files(list(bad.values()), executor=ProcessExecutor(2))


def test_the_summary_holds_no_trace(shared: Path) -> None:
    """What comes back per rank is a few events, not the trace; cross-rank figures need no
    more (test_executor_equals_single_process)."""
    limits = trace_limits()
    for path in multi_rank_files(shared):
        outcome = analyse_rank(RankTask(0, str(path), str(path), limits))
        assert outcome.analysis is not None and outcome.failure is None
        skeleton = outcome.analysis.trace
        assert len(skeleton.events) <= 2 + 8 * 8 and len(skeleton.flows) == 0
        assert skeleton.raw_event_count > 4000
        # the pickled outcome: at most ~36 bytes for each of the KEPT_GAPS longest idle gaps
        # (the timeline's), and a little more
        size = len(pickle.dumps(outcome))
        assert size < 16_384 + 36 * KEPT_GAPS, (path.name, size)


def test_urls_are_opened_through_fsspec(
    shared: Path, references: dict[str, tuple[str, str]]
) -> None:
    folder = shared / TRACES / HTA / "trace_filter"
    urls = trace_files([folder.resolve().as_uri()])
    assert urls == [p.resolve().as_uri() for p in sorted(folder.glob("*.json.gz"))]
    names = [str(p) for p in cases(shared)["pair"][0]]
    job = analyze_files(urls, names=names, executor=ProcessExecutor(2))
    assert to_json(build_view(job)) == references["pair"][0]


def test_a_url_without_its_filesystem_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"fsspec cannot open this kind of URL.*s3fs"):
        trace_files(["nosuchfs://bucket/job/"])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("threads", "'threads' is not an executor: expected local, processes:N or dask://"),
        ("processes:0", "must be a whole number >= 1"),
        ("dask://scheduler", "expected dask://HOST:PORT"),
    ],
)
def test_cli_rejects_a_bad_executor(shared: Path, value: str, message: str) -> None:
    trace = shared / TRACES / HTA / "trace_filter/sampled_rank-0.json.gz"
    run = subprocess.run(
        [sys.executable, "-m", "gpulens", "trace", str(trace), "--executor", value],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == ConfigError.exit_code, run.stderr
    assert message in run.stderr and run.stderr.startswith("error:")


def test_cli_processes_executor(shared: Path, references: dict[str, tuple[str, str]]) -> None:
    folder = cases(shared)["pair"][0][0].parent
    run = subprocess.run(
        [
            *(sys.executable, "-m", "gpulens", "trace"),
            *(str(folder), "--format", "json", "--executor", "processes:2"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    assert run.stdout == references["pair"][0]
