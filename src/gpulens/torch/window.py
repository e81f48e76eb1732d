"""One reading's worth of steps: per-step figures summed, then turned into app metric values.

Pure arithmetic, no torch: the tracker's writer thread feeds it the steps the training thread
recorded and asks for `values()` once per window. Every figure is a mean per step or a rate
over the time the steps took; what was not measured is left out (absent, never 0).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Step:
    """What the training thread records for one step (seconds; None: not measured)."""

    seconds: float
    wait_s: float
    samples: float | None = None
    tokens: float | None = None


@dataclass(slots=True)
class Window:
    """Sums over the steps of one window, plus the phase times resolved in it."""

    steps: int = 0
    step_s: float = 0.0
    wait_s: float = 0.0
    samples: float = 0.0
    sample_steps: int = 0
    tokens: float = 0.0
    token_steps: int = 0
    phase_steps: int = 0
    forward_s: float = 0.0
    backward_s: float = 0.0
    optimizer_s: float = 0.0
    optimizer_steps: int = 0
    gpu_s: float = 0.0  # GPU time between consecutive step ends (CUDA events)
    gpu_steps: int = 0

    def add(self, step: Step) -> None:
        self.steps += 1
        self.step_s += step.seconds
        self.wait_s += step.wait_s
        if step.samples is not None:
            self.samples += step.samples
            self.sample_steps += 1
        if step.tokens is not None:
            self.tokens += step.tokens
            self.token_steps += 1

    def add_phases(self, forward_s: float, backward_s: float, optimizer_s: float | None) -> None:
        self.phase_steps += 1
        self.forward_s += forward_s
        self.backward_s += backward_s
        if optimizer_s is not None:
            self.optimizer_s += optimizer_s
            self.optimizer_steps += 1

    def add_gpu_steps(self, seconds: float, steps: int) -> None:
        self.gpu_s += seconds
        self.gpu_steps += steps

    def values(self, step_flops: float | None, peak_flops: float | None) -> dict[str, float]:
        """The window's app metric values (empty when it holds no step).

        Throughput is over the steps that reported it (samples/s over the time of the steps
        that gave `samples`); model FLOP/s is `step_flops` per step over the steps' time (on
        a GPU, the GPU's time between step ends, which the CPU's may not follow while it
        queues work ahead), and MFU that over `peak_flops` when the peak is known."""
        out: dict[str, float] = {}
        if self.steps == 0 or self.step_s <= 0:
            return out
        n, total = self.steps, self.step_s
        out["app_steps"] = float(n)
        out["app_step_seconds"] = total / n
        out["app_data_wait_seconds"] = self.wait_s / n
        out["app_data_wait_ratio"] = min(max(self.wait_s / total, 0.0), 1.0)
        if self.sample_steps:
            seconds = total * self.sample_steps / n
            out["app_samples_per_second"] = self.samples / seconds
            out["app_batch_size"] = self.samples / self.sample_steps
        if self.token_steps:
            out["app_tokens_per_second"] = self.tokens / (total * self.token_steps / n)
        if self.phase_steps:
            k = self.phase_steps
            out["app_forward_seconds"] = self.forward_s / k
            out["app_backward_seconds"] = self.backward_s / k
            if self.optimizer_steps:
                out["app_optimizer_seconds"] = self.optimizer_s / self.optimizer_steps
        if step_flops is not None:
            per_step = self.gpu_s / self.gpu_steps if self.gpu_steps else total / n
            achieved = step_flops / per_step
            out["app_step_flops"] = step_flops
            out["app_flops_per_second"] = achieved
            if peak_flops:
                out["app_peak_flops_per_second"] = peak_flops
                out["app_mfu_ratio"] = achieved / peak_flops
        return out
