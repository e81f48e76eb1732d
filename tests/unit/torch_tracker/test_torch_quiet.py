"""Disabled means nothing at all; a failing tracker logs once and training goes on; without
torch, gpulens.torch gives one clear error and the rest of gpulens works."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import gpulens.torch as gt

ROOT = Path(__file__).resolve().parents[3]


def test_disabled_makes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULENS_DISABLE", "1")
    model = torch.nn.Linear(2, 2)
    loader = [torch.randn(3, 2) for _ in range(3)]
    threads = threading.active_count()
    with gt.track(job="off", data_dir=tmp_path / "store", model=model) as run:
        assert isinstance(run, gt.NullRun)
        assert run.wrap(loader) is loader  # the loader itself, not a wrapper
        for x in run.wrap(loader):
            model(x)
            run.step(samples=3)
        assert threading.active_count() == threads
    assert not (tmp_path / "store").exists()
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_an_unwritable_store_never_breaks_training(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the store should be")
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    caplog.set_level(logging.WARNING, logger="gpulens.torch")
    options = {"interval_s": 0.05, "flush_s": 0.05}
    with gt.track(job="j", data_dir=blocker, model=model, optimizer=opt, **options) as run:
        for _ in range(20):
            model(torch.randn(3, 2)).sum().backward()
            opt.step()
            run.step(samples=3)
            threading.Event().wait(0.01)
    assert run.steps == 20
    said = [r for r in caplog.records if r.name == "gpulens.torch"]
    assert 1 <= len(said) <= 2, [r.getMessage() for r in said]  # retrying, then the last flush
    assert all("not-a-dir" in r.getMessage() for r in said)


def test_a_failing_hook_logs_once_and_goes_quiet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = torch.nn.Linear(2, 2)
    caplog.set_level(logging.WARNING, logger="gpulens.torch")
    with gt.track(job="j", data_dir=tmp_path, model=model) as run:
        assert isinstance(run, gt.Run)
        run._phases._marks = None  # type: ignore[assignment]  # the next mark raises
        for _ in range(5):
            model(torch.randn(1, 2))
            run.step()
    said = [r.getMessage() for r in caplog.records if r.name == "gpulens.torch"]
    assert len(said) == 1 and "stopped recording" in said[0]
    assert not model._forward_hooks  # hooks taken off
    assert run.steps == 0


_BLOCK_TORCH = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'torch' or name.startswith('torch.'):\n"
    "            raise ModuleNotFoundError(f\"No module named '{name}'\")\n"
    "sys.meta_path.insert(0, Block())\n"
)


def _without_torch(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCK_TORCH + code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_without_torch_one_clear_error() -> None:
    out = _without_torch("import gpulens.torch")
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: gpulens.torch needs PyTorch, which is not installed")


def test_without_torch_gpulens_and_its_report_work(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with gt.track(job="cli", data_dir=store) as run:
        for _ in range(3):
            run.step(samples=2)
    code = (
        "import sys, gpulens, gpulens.app.analysis, gpulens.present.cli\n"
        "sys.argv = ['gpulens', 'report', '--data-dir', sys.argv[1], '--job', 'cli']\n"
        "from gpulens.present.entry import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "assert 'torch' not in sys.modules\n"
    )
    out = _without_torch(code, str(store))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Training: the framework's own timing" in out.stdout
    assert "steps                           3" in out.stdout


def test_a_bad_configuration_leaves_the_run_untracked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("GPULENS_COLLECT_INTERVAL_SECONDS", "not-a-number")
    caplog.set_level(logging.WARNING, logger="gpulens.torch")
    with gt.track(job="j", data_dir=tmp_path / "store") as run:
        run.step()
    assert isinstance(run, gt.NullRun)
    [said] = [r.getMessage() for r in caplog.records if r.name == "gpulens.torch"]
    assert "not tracking this run" in said and "GPULENS_COLLECT_INTERVAL_SECONDS" in said
    assert not (tmp_path / "store").exists()
