"""Forward, backward and optimizer spans: from marks, and from real hooks on a real model."""

from __future__ import annotations

import time

import torch

from gpulens.torch.phases import FWD_END, FWD_START, OPT_END, OPT_START, PhaseTimer, spans


def test_spans_plain_and_accumulated_steps() -> None:
    marks = [(FWD_START, 0.0), (FWD_END, 1.0), (OPT_START, 3.0), (OPT_END, 3.5)]
    assert spans(marks) == (1.0, 2.0, 0.5)
    accumulated = [
        (FWD_START, 0.0), (FWD_END, 1.0), (FWD_START, 2.5), (FWD_END, 3.0),
        (OPT_START, 4.0), (OPT_END, 4.25),
    ]  # fmt: skip
    assert spans(accumulated) == (1.5, 2.5, 0.25)


def test_spans_with_the_forward_inside_the_optimizer_step() -> None:
    # Lightning's closure: optimizer start, forward, backward, update, optimizer end
    marks = [(OPT_START, 0.0), (FWD_START, 0.5), (FWD_END, 1.5), (OPT_END, 4.0)]
    assert spans(marks) == (1.0, 2.5, None)


class _Slow(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.03)
        return self.lin(x)


def test_hooks_time_a_real_step_on_the_cpu() -> None:
    model = _Slow()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    errors: list[BaseException] = []
    timer = PhaseTimer(model, opt, cuda=False, on_error=errors.append)
    loss = model(torch.randn(2, 4)).sum()
    time.sleep(0.02)  # between forward and optimizer: counted as backward
    loss.backward()
    opt.step()
    timer.end_step()
    [(forward, backward, optimizer)] = timer.collect()
    assert 0.03 <= forward < 1.0  # the forward's sleep, whatever the machine's load
    assert backward >= 0.02  # the sleep between forward and optimizer
    assert 0 <= optimizer < forward
    timer.remove()
    model(torch.randn(2, 4))
    timer.end_step()
    assert timer.collect() == [] and not errors  # hooks gone: nothing marked
