"""The wrapped DataLoader (time blocked in its iterator) and its workers' CPU load."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

import psutil

T = TypeVar("T")


class Wrapped(Generic[T]):
    """Iterates like `loader`; each `next()` is timed and handed to `on_wait(start, seconds)`.

    `on_iter(iterator)` sees each new iterator (to find its worker processes). Attributes other
    than iteration (`dataset`, `batch_size`, `len()`...) are the loader's."""

    def __init__(
        self,
        loader: Iterable[T],
        on_wait: Callable[[float, float], None],
        on_iter: Callable[[Any], None],
    ) -> None:
        self._loader = loader
        self._on_wait = on_wait
        self._on_iter = on_iter

    def __iter__(self) -> Iterator[T]:
        it = iter(self._loader)
        self._on_iter(it)
        clock, on_wait = time.perf_counter, self._on_wait
        while True:
            start = clock()
            try:
                batch = next(it)
            except StopIteration:
                return
            on_wait(start, clock() - start)
            yield batch

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_loader":  # not during copy or unpickling
            raise AttributeError(name)
        return getattr(self._loader, name)


def worker_pids(iterator: Any) -> list[int]:
    """PIDs of a DataLoader iterator's worker processes (none for num_workers=0)."""
    workers = getattr(iterator, "_workers", None) or []
    return [int(w.pid) for w in workers if getattr(w, "pid", None)]


class WorkerCpu:
    """CPU busy share of the DataLoader workers between two `sample()` calls.

    Workers are the PIDs handed to `watch` (from the wrapped loader's iterator), else this
    process's child processes (what the framework callbacks see)."""

    def __init__(self) -> None:
        self._pids: list[int] | None = None
        self._last: dict[int, float] = {}
        self._last_t: float | None = None
        self._me = psutil.Process(os.getpid())

    def watch(self, pids: list[int]) -> None:
        self._pids = pids

    def _procs(self) -> list[psutil.Process]:
        if self._pids is not None:
            out = []
            for pid in self._pids:
                try:
                    out.append(psutil.Process(pid))
                except psutil.Error:
                    continue
            return out
        try:
            return list(self._me.children())
        except psutil.Error:
            return []

    def sample(self) -> dict[str, float]:
        """`app_loader_workers` and `app_loader_cpu_ratio` since the last sample (the ratio
        only from the second sample on, over workers seen in both); nothing while the watched
        workers have exited and new ones are not there yet (between epochs)."""
        now = time.monotonic()
        times: dict[int, float] = {}
        for proc in self._procs():
            try:
                t = proc.cpu_times()
            except psutil.Error:
                continue
            times[proc.pid] = float(t.user + t.system)
        out: dict[str, float] = {}
        if self._pids and not times:  # between epochs: the workers have exited, none yet
            self._last, self._last_t = {}, now
            return out
        if times or self._pids is not None:
            out["app_loader_workers"] = float(len(times))
        both = [pid for pid in times if pid in self._last]
        if both and self._last_t is not None and now > self._last_t:
            busy = sum(times[p] - self._last[p] for p in both)
            out["app_loader_cpu_ratio"] = max(busy, 0.0) / (len(both) * (now - self._last_t))
        self._last, self._last_t = times, now
        return out
