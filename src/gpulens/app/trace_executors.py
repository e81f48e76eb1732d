"""Where the per-rank analyses of a job run: in this process, in a local process pool, or on
a Dask cluster (`trace_dask.py`).

An executor runs `trace_rank.analyse_rank` once per `RankTask` and returns the outcomes in
task order; the cross-rank part then runs here (`app/traces.py`). Each worker opens its rank
file itself and sends back the rank's summary only, so trace bytes never pass through this
process and its memory grows with the summaries, not the traces.

`executor(spec, n_files)` turns `--executor` into one:

* `local`: in this process, one rank after the other (each rank's trace is dropped once it
  is analysed, so memory holds one trace at a time);
* `processes:N` (or `processes`: one per core): a pool of N local worker processes, started
  by a fork server (so a caller with threads, such as the dashboard, can use it too);
* `dask://HOST:PORT`: the Dask distributed scheduler at HOST:PORT (needs the `dask` extra);
* `auto` (the default): `local` for one file, or for files of less than `POOL_MIN_BYTES` in
  all (starting the pool would cost more than it saves), else a process pool of
  min(files, cores) workers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gpulens.app.trace_rank import RankOutcome, RankTask, analyse_rank, settled
from gpulens.errors import ConfigError, GpulensError

__all__ = [
    "EXECUTOR_HELP",
    "LocalExecutor",
    "ProcessExecutor",
    "TraceExecutor",
    "executor",
]

EXECUTOR_HELP = "local, processes:N or dask://HOST:PORT"
POOL_MIN_BYTES = 8 * 1024 * 1024  # of trace files (gzip or JSON): ~0.5 s of analysis or more


class TraceExecutor(Protocol):
    """Runs `analyse_rank` over tasks; outcomes in task order."""

    @property
    def name(self) -> str: ...

    def run(self, tasks: Sequence[RankTask]) -> list[RankOutcome]: ...


@dataclass(frozen=True)
class LocalExecutor:
    """Every rank in this process, one after the other."""

    name: str = "local"

    def run(self, tasks: Sequence[RankTask]) -> list[RankOutcome]:
        return [analyse_rank(t) for t in tasks]


@dataclass(frozen=True)
class ProcessExecutor:
    """A pool of `workers` local processes (fork server), one rank per task."""

    workers: int

    @property
    def name(self) -> str:
        return f"processes:{self.workers}"

    def run(self, tasks: Sequence[RankTask]) -> list[RankOutcome]:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        if not tasks:
            return []
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["gpulens.app.trace_rank", "gpulens.app.traces"])
        size = min(self.workers, len(tasks))
        try:
            with ProcessPoolExecutor(size, mp_context=context) as pool:
                return [settled(o) for o in pool.map(analyse_rank, tasks)]
        except BrokenProcessPool as exc:
            raise GpulensError(
                f"a worker process of --executor {self.name} died (killed, or out of memory?) "
                "while analysing the ranks; rerun with fewer processes, or with --executor "
                "local to see which rank fails"
            ) from exc


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
        return os.cpu_count() or 1


def executor(spec: str | None, n_files: int, total_bytes: int | None = None) -> TraceExecutor:
    """The executor `spec` names (`--executor`, module docstring), for `n_files` files of
    `total_bytes` (None: unknown); ConfigError quoting a bad one."""
    text = (spec or "auto").strip()
    if text == "auto":
        small = total_bytes is not None and total_bytes < POOL_MIN_BYTES
        if n_files <= 1 or small:
            return LocalExecutor()
        return ProcessExecutor(min(n_files, _cores()))
    if text == "local":
        return LocalExecutor()
    if text == "processes" or text.startswith("processes:"):
        count = text.partition(":")[2] or str(_cores())
        if not count.isdigit() or int(count) < 1:
            raise ConfigError(
                f"--executor {text!r}: the number of processes must be a whole number >= 1, "
                "e.g. processes:4"
            )
        return ProcessExecutor(int(count))
    if text.startswith("dask://"):
        from gpulens.app.trace_dask import DaskExecutor

        return DaskExecutor.from_url(text)
    raise ConfigError(f"--executor {text!r} is not an executor: expected {EXECUTOR_HELP}")
