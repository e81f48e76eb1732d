"""Hugging Face `transformers.Trainer` callback: the gpulens.torch tracker inside `train()`.

    from gpulens.integrations.hf import GpulensCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[GpulensCallback(job="bert-a", data_dir="runs/")])

One step is one optimizer step (its gradient-accumulation micro-batches together). Data wait
is the time from the end of a step to the start of the next, which the Trainer spends fetching
the step's batches (evaluation, logging and checkpoints in between are left out). Samples per
step are `per_device_train_batch_size × gradient_accumulation_steps`; tokens come from
`state.num_input_tokens_seen` when `include_num_input_tokens_seen` is on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpulens.integrations._common import need

transformers = need(
    "transformers", "gpulens.integrations.hf", "pip install transformers (and torch)"
)
from gpulens.torch.run import NullRun, Run, start  # noqa: E402


def _unwrap(optimizer: Any) -> Any:
    """The torch optimizer inside accelerate's AcceleratedOptimizer (its hooks fire there)."""
    import torch

    inner = getattr(optimizer, "optimizer", None)
    return inner if isinstance(inner, torch.optim.Optimizer) else optimizer


class GpulensCallback(transformers.TrainerCallback):  # type: ignore[misc,name-defined]
    """Tracks the Trainer's training run into a gpulens store (`job`, `data_dir` and the other
    options as in `gpulens.torch.track`)."""

    def __init__(
        self, job: str | None = None, data_dir: str | Path | None = None, **options: Any
    ) -> None:
        self.job = job
        self.data_dir = data_dir
        self.options = options
        self.run: Run | NullRun | None = None
        self._tokens_seen = 0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None:
            self.run.close()
        options = {"source": "gpulens.hf", **self.options}
        model, optimizer = kwargs.get("model"), kwargs.get("optimizer")
        self.run = start(
            self.job, self.data_dir, model, _unwrap(optimizer) if optimizer else None, **options
        )
        self._tokens_seen = int(getattr(state, "num_input_tokens_seen", 0) or 0)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None:
            self.run.batch_arrived()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is None:
            return
        samples = args.per_device_train_batch_size * args.gradient_accumulation_steps
        seen = int(getattr(state, "num_input_tokens_seen", 0) or 0)
        tokens = seen - self._tokens_seen if seen > self._tokens_seen else None
        self._tokens_seen = seen
        self.run.step(samples=samples, tokens=tokens)

    def _pause_ended(self) -> None:
        if self.run is not None:
            self.run.restart_clock()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._pause_ended()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._pause_ended()

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._pause_ended()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None:
            self.run.close()
