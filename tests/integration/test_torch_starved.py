"""A real small CNN trained from a starved DataLoader and from a fed one, tracked by
gpulens.torch; the data wait the tracker measured (as `gpulens report` shows it) against the
wait injected into the dataset, and input_bound on the starved run only."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from tests.integration.integrations_check import report as _report  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import gpulens.torch as gt  # noqa: E402
from gpulens.analyze.states import Thresholds  # noqa: E402

BATCH = 16
STEPS = 16
SLEEP_S = 0.01  # per sample: ~160 ms of injected wait per batch


class Images(Dataset):
    """Random 3x16x16 images; `sleep_s` per item starves the loader, the time slept is kept."""

    def __init__(self, n: int, sleep_s: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 16, 16, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.sleep_s = sleep_s
        self.slept = 0.0

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):  # type: ignore[no-untyped-def]
        if self.sleep_s:
            t = time.perf_counter()
            time.sleep(self.sleep_s)
            self.slept += time.perf_counter() - t
        return self.x[i], self.y[i]


def _cnn() -> torch.nn.Module:
    # wide enough that a step's compute dwarfs a fed loader's own indexing and collation
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(128 * 4 * 4, 10),
    )  # fmt: skip


def _train(job: str, data_dir: Path, sleep_s: float) -> tuple[float, float]:
    """(injected wait share, wall seconds) of a tracked training run."""
    torch.manual_seed(0)
    model = _cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ds = Images(BATCH * STEPS, sleep_s)
    loader = DataLoader(ds, batch_size=BATCH, num_workers=0)
    with gt.track(job=job, data_dir=data_dir, model=model, optimizer=opt, interval_s=0.5) as run:
        start = time.perf_counter()
        for x, y in run.wrap(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.step(samples=x.shape[0])
        wall = time.perf_counter() - start
    assert run.steps == STEPS
    return ds.slept / wall, wall


def test_starved_against_fed(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    injected, _ = _train("starved", store, SLEEP_S)
    fed_injected, _ = _train("fed", store, 0.0)
    assert injected > 0.3 and fed_injected == 0.0, injected  # the runs are what they claim to be

    starved = _report(store, "starved")
    [job] = starved["training"]
    assert job["steps"] == STEPS
    assert abs(job["data_wait_ratio"] - injected) <= 0.05, (job["data_wait_ratio"], injected)
    assert job["samples_per_second"] > 0 and job["step_flops"] > 0
    assert job["forward_seconds"] > 0 and job["backward_seconds"] > 0
    bound = [f for f in starved["findings"] if f["rule_id"] == "input_bound"]
    assert len(bound) == 1
    [wait] = [e for e in bound[0]["evidence"] if e["metric"] == "data_wait"]
    assert "framework's timing" in wait["note"]
    assert wait["value"] == pytest.approx(job["data_wait_ratio"], abs=0.02)

    fed = _report(store, "fed")
    [job] = fed["training"]
    # a fed loader still takes its own indexing and collation time, a share that depends on the
    # machine and the network (10 % with one of a few thousand weights): far below the starved
    # run's share and the finding's threshold
    assert job["data_wait_ratio"] < min(0.5 * injected, Thresholds().data_wait_high / 2)
    assert not [f for f in fed["findings"] if f["rule_id"] == "input_bound"]
