"""FLOPs of one training step of a Linear stack against the hand count, and the MFU peak."""

from __future__ import annotations

import itertools

import pytest
import torch

from gpulens.errors import ConfigError
from gpulens.torch import flops
from gpulens.torch.run import Run

SIZES = (96, 256, 128, 10)  # in -> hidden -> hidden -> out
BATCH = 24


def _stack() -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(SIZES)):
        layers.append(torch.nn.Linear(a, b))
        if i < len(SIZES) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def _train(run: Run, model: torch.nn.Module, steps: int, input_grad: bool) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x = torch.randn(BATCH, SIZES[0], requires_grad=input_grad)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.step(samples=BATCH)


@pytest.mark.parametrize("input_grad", [True, False])
def test_step_flops_match_the_hand_count(tmp_path, input_grad: bool) -> None:
    model = _stack()
    pairs = list(itertools.pairwise(SIZES))
    # forward 2·in·out per sample, backward twice that (input and weight gradients)
    hand = sum(6 * a * b for a, b in pairs) * BATCH
    if not input_grad:  # no gradient for the input: the first layer's input-gradient matmul
        hand -= 2 * pairs[0][0] * pairs[0][1] * BATCH
    with Run("flops", tmp_path, model=model, count_flops_at=2) as run:
        _train(run, model, 4, input_grad)
    assert run.step_flops is not None
    assert run.step_flops == pytest.approx(hand, rel=0.01)


def test_precision_and_peak_from_the_catalog() -> None:
    assert flops.peak_flops("NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(989.4e12)
    assert flops.peak_flops("NVIDIA A100-SXM4-80GB", "tf32") == pytest.approx(156e12)
    assert flops.peak_flops("some unknown card", "bf16") is None
    assert flops.peak_flops(None, "bf16") is None  # the CPU: no MFU, never a guess
    model = torch.nn.Linear(2, 2).to(torch.bfloat16)
    assert flops.precision_of(model, None) == "bf16"
    assert flops.precision_of(model, "fp8") == "fp8"
    assert flops.precision_of(None, None) is None
    with pytest.raises(ConfigError, match="dtype 'int4' is not one of"):
        Run("x", "unused-dir", dtype="int4")
