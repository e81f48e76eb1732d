"""A window's per-step sums become app metric values (pure arithmetic, hand-computed)."""

from __future__ import annotations

import pytest

from gpulens.torch.window import Step, Window


def test_means_and_rates_over_the_steps() -> None:
    w = Window()
    w.add(Step(0.10, 0.04, samples=32, tokens=None))
    w.add(Step(0.30, 0.06, samples=32, tokens=None))
    v = w.values(step_flops=None, peak_flops=None)
    assert v["app_steps"] == 2
    assert v["app_step_seconds"] == pytest.approx(0.2)
    assert v["app_data_wait_seconds"] == pytest.approx(0.05)
    assert v["app_data_wait_ratio"] == pytest.approx(0.10 / 0.40)
    assert v["app_samples_per_second"] == pytest.approx(64 / 0.4)
    assert v["app_batch_size"] == 32
    # nothing measured is absent, never 0
    for absent in ("app_tokens_per_second", "app_forward_seconds", "app_mfu_ratio"):
        assert absent not in v


def test_flops_and_mfu_against_the_peak() -> None:
    w = Window()
    for _ in range(4):
        w.add(Step(0.5, 0.0, tokens=1000))
    w.add_phases(0.1, 0.2, 0.05)
    w.add_phases(0.1, 0.2, None)  # a closure step: no optimizer time of its own
    v = w.values(step_flops=2e12, peak_flops=1e13)
    assert v["app_tokens_per_second"] == pytest.approx(2000)
    assert v["app_flops_per_second"] == pytest.approx(4e12)
    assert v["app_mfu_ratio"] == pytest.approx(0.4)
    assert v["app_peak_flops_per_second"] == 1e13
    assert v["app_forward_seconds"] == pytest.approx(0.1)
    assert v["app_optimizer_seconds"] == pytest.approx(0.05)  # over the one step that had it
    assert "app_mfu_ratio" not in w.values(step_flops=2e12, peak_flops=None)


def test_an_empty_window_gives_nothing() -> None:
    assert Window().values(1.0, 1.0) == {}


def test_on_a_gpu_flops_follow_the_gpu_time_between_step_ends() -> None:
    w = Window()
    for _ in range(4):  # the CPU queued four steps in 40 ms
        w.add(Step(0.01, 0.0))
    w.add_gpu_steps(0.3, 3)  # the GPU ran them 100 ms apart
    v = w.values(step_flops=1e12, peak_flops=1e14)
    assert v["app_flops_per_second"] == pytest.approx(1e13)
    assert v["app_mfu_ratio"] == pytest.approx(0.1)
    assert v["app_step_seconds"] == pytest.approx(0.01)  # the loop's own time stays the CPU's
