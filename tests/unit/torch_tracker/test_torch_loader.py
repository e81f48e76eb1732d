"""The wrapped loader and its workers: the time blocked in next(), the workers found from a
real DataLoader's iterator, and their CPU load told busy from idle."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import gpulens.torch as gt
from gpulens.store import Store
from gpulens.torch.loader import WorkerCpu, Wrapped, worker_pids


def test_wrapped_times_each_next_and_keeps_the_loader_attributes() -> None:
    waits: list[float] = []
    loader = DataLoader(list(range(10)), batch_size=5)

    def slow():  # type: ignore[no-untyped-def]
        for batch in loader:
            time.sleep(0.02)
            yield batch

    wrapped = Wrapped(slow(), lambda start, s: waits.append(s), lambda it: None)
    assert [b.tolist() for b in wrapped] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert len(waits) == 2 and all(w >= 0.02 for w in waits)
    assert Wrapped(loader, print, print).batch_size == 5 and len(Wrapped(loader, print, print)) == 2


def _child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def test_worker_cpu_tells_busy_from_idle() -> None:
    busy, idle = _child("while True: pass"), _child("import time; time.sleep(60)")
    try:
        cpu = WorkerCpu()
        cpu.watch([busy.pid])
        cpu.sample()
        time.sleep(1.0)
        seen = cpu.sample()
        assert seen["app_loader_workers"] == 1 and seen["app_loader_cpu_ratio"] > 0.02
        cpu.watch([idle.pid])
        cpu.sample()
        time.sleep(0.5)
        assert cpu.sample()["app_loader_cpu_ratio"] < 0.01
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()


class _Burn(Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 192  # ~1 s an epoch on two workers: several samples of the same workers' CPU

    def __getitem__(self, i: int) -> torch.Tensor:
        end = time.process_time() + 0.01  # 10 ms of CPU per sample in the worker
        while time.process_time() < end:
            pass
        return torch.zeros(4)


def test_workers_of_a_real_dataloader(tmp_path: Path) -> None:
    loader = DataLoader(_Burn(), batch_size=8, num_workers=2)
    it = iter(loader)
    assert len(worker_pids(it)) == 2
    del it
    with gt.track(job="workers", data_dir=tmp_path, interval_s=0.3) as run:
        for _epoch in range(2):
            for x in run.wrap(loader):
                run.step(samples=x.shape[0])
    with Store(tmp_path) as store:
        rows = store.query(
            "SELECT app_loader_workers, app_loader_cpu_ratio FROM app ORDER BY ts"
        ).to_pylist()
    # live workers when sampled: 2 while an epoch runs (fewer while they exit at its end,
    # none reported between epochs and after the last)
    workers = [r["app_loader_workers"] for r in rows if r["app_loader_workers"] is not None]
    assert workers and max(workers) == 2 and min(workers) >= 1
    ratios = [r["app_loader_cpu_ratio"] for r in rows if r["app_loader_cpu_ratio"] is not None]
    assert ratios and max(ratios) > 0.02 and all(r <= 1.05 for r in ratios)


def test_num_workers_zero_has_no_workers(tmp_path: Path) -> None:
    with gt.track(job="w0", data_dir=tmp_path) as run:
        for x in run.wrap(DataLoader(list(range(8)), batch_size=4)):
            run.step(samples=len(x))
    with Store(tmp_path) as store:
        [row] = store.query("SELECT app_loader_workers, app_loader_cpu_ratio FROM app").to_pylist()
    assert row == {"app_loader_workers": 0.0, "app_loader_cpu_ratio": None}


@pytest.fixture(autouse=True)
def _enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPULENS_DISABLE", raising=False)
