"""`gpulens trace --executor dask://HOST:PORT` on a real `distributed.LocalCluster` (two worker
processes under nannies, on loopback; one cluster for the module):

* every multi-rank job of the stored real traces gives the report JSON of the single-process
  analysis of the fully loaded traces, byte for byte, through the command too;
* a rank that cannot be parsed is listed and the others complete;
* a worker killed (SIGKILL) while it reads a rank has that rank run again on another worker,
  and the job's result is the same;
* the workers open fsspec URLs themselves;
* an unreachable scheduler, and a missing `distributed`, are one clear error each.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from trace_executor_cases import HTA, TRACES, cases, reference_json, reference_reports, reports

distributed = pytest.importorskip("distributed", reason="needs the dask extra (distributed)")

from gpulens.app.trace_dask import DaskExecutor  # noqa: E402
from gpulens.app.trace_executors import executor  # noqa: E402
from gpulens.app.trace_rank import RankTask  # noqa: E402
from gpulens.app.traces import analyze_files, trace_files, trace_limits  # noqa: E402
from gpulens.errors import ConfigError, SourceUnavailable  # noqa: E402
from gpulens.present.reports.trace import build_view, to_json  # noqa: E402

CASES = ("pair", "pair_hta_window", "every_multi_rank_file", "every_multi_rank_file_hta_window")
CASES += ("one_step_rank_in_window_job",)


@pytest.fixture(scope="module")
def cluster() -> Iterator[distributed.LocalCluster]:
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        scheduler_port=0,
        dashboard_address=":0",
        silence_logs=40,
    ) as local:
        yield local


@pytest.fixture(scope="module")
def spec(cluster: distributed.LocalCluster) -> str:
    return "dask://" + cluster.scheduler_address.removeprefix("tcp://")


@pytest.fixture(scope="module")
def references(shared: Path) -> dict[str, tuple[str, str]]:
    """Per case, the single-process report: JSON and HTML."""
    return {
        name: reference_reports(files, window) for name, (files, window) in cases(shared).items()
    }


@pytest.mark.parametrize("case", CASES)
def test_dask_equals_single_process(
    shared: Path, references: dict[str, tuple[str, str]], spec: str, case: str
) -> None:
    files, window = cases(shared)[case]
    job = analyze_files(files, hta_window=window, executor=executor(spec, len(files)))
    assert reports(job) == references[case]


def test_cli_on_dask(shared: Path, references: dict[str, tuple[str, str]], spec: str) -> None:
    folder = cases(shared)["pair"][0][0].parent
    run = subprocess.run(
        [
            *(sys.executable, "-m", "gpulens", "trace", str(folder)),
            *("--format", "json", "--executor", spec),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    assert run.stdout == references["pair"][0]


def test_a_rank_that_fails_is_listed_and_the_others_complete(
    shared: Path, tmp_path: Path, spec: str
) -> None:
    pair = cases(shared)["pair"][0]
    bad = tmp_path / "rank_9.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": 1, "dur": ', encoding="utf-8")
    job = analyze_files([pair[0], bad, pair[1]], executor=executor(spec, 3))
    doc = json.loads(to_json(build_view(job)))
    (failed,) = doc.pop("failed_ranks")
    assert (failed["position"], failed["file"], failed["error_type"]) == (
        1,
        str(bad),
        "TraceFormatError",
    )
    assert failed["error"].startswith(f"{bad}: ")
    alone = json.loads(reference_json(pair, False))
    assert alone.pop("failed_ranks") == []
    assert doc == alone


def _readers(path: Path, pids: list[int] | None = None) -> list[int]:
    """The processes (of `pids`, default: all) that hold `path` open."""
    if pids is None:
        pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    out = []
    for pid in pids:
        try:
            links = [fd.readlink() for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:  # gone, not ours to read, or a descriptor closed while listed
            continue
        if path in links:
            out.append(pid)
    return out


def _wait(condition: Callable[[], object], what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_killed_worker_has_its_rank_run_on_another(
    shared: Path, tmp_path: Path, spec: str, cluster: distributed.LocalCluster
) -> None:
    """Rank 1's file is a FIFO: the worker that opens it waits in `read` until this test
    writes. The test kills that worker mid-read (SIGKILL), waits until another worker process
    has opened the FIFO (Dask ran the rank again), and only then writes the real rank file."""
    pair = cases(shared)["pair"][0]
    fifo = tmp_path / pair[1].name
    os.mkfifo(fifo)
    files = [pair[0], fifo]
    result: dict[str, object] = {}

    def analyse() -> None:
        try:
            result["job"] = analyze_files(files, executor=executor(spec, 2))
        except BaseException as exc:  # reported by the assertion below
            result["error"] = exc

    with distributed.Client(cluster, set_as_default=False) as client:
        worker_pids = list(client.run(os.getpid).values())
        runner = threading.Thread(target=analyse, daemon=True)
        runner.start()
        with open(fifo, "wb") as pipe:  # noqa: PTH123 - blocks until a worker opens the FIFO
            _wait(lambda: _readers(fifo, worker_pids), "no worker opened the rank file")
            (victim,) = _readers(fifo, worker_pids)
            os.kill(victim, signal.SIGKILL)  # mid-read: nothing written yet
            _wait(lambda: not _readers(fifo, [victim]), "the killed worker still reads")
            others = [os.getpid(), victim]
            _wait(
                lambda: [p for p in _readers(fifo) if p not in others],
                "the rank was not run again after its worker was killed",
            )
            (again,) = [p for p in _readers(fifo) if p not in others]
            pipe.write(pair[1].read_bytes())
        runner.join(timeout=180)
        assert not runner.is_alive(), "the job did not finish after the worker was killed"
        now = list(client.run(os.getpid).values())
    assert victim not in now and again != victim
    assert "error" not in result, result.get("error")
    assert victim not in now
    # the same result as in one process over the same files (the FIFO replaced by the file)
    fifo.unlink()
    fifo.write_bytes(pair[1].read_bytes())
    expected = reference_json(files, False)
    assert to_json(build_view(result["job"])) == expected  # type: ignore[arg-type]


def test_workers_open_urls(shared: Path, references: dict[str, tuple[str, str]], spec: str) -> None:
    folder = shared / TRACES / HTA / "trace_filter"
    urls = trace_files([folder.resolve().as_uri()])
    names = [str(p) for p in cases(shared)["pair"][0]]
    job = analyze_files(urls, names=names, executor=executor(spec, len(urls)))
    assert to_json(build_view(job)) == references["pair"][0]


def test_unreachable_scheduler_is_one_clear_error(shared: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = DaskExecutor(f"tcp://127.0.0.1:{port}", timeout_s=2)
    task = RankTask(0, str(cases(shared)["pair"][0][0]), "rank0", trace_limits())
    with pytest.raises(SourceUnavailable, match="cannot reach the Dask scheduler at dask://127"):
        dead.run([task])


def test_missing_distributed_is_one_clear_error(
    shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    task = RankTask(0, str(cases(shared)["pair"][0][0]), "rank0", trace_limits())
    with pytest.raises(ConfigError, match=r"pip install 'gpulens\[dask\]'"):
        executor("dask://127.0.0.1:8786", 1).run([task])
