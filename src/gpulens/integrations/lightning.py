"""Lightning callback: the gpulens.torch tracker inside `Trainer.fit()`.

    from gpulens.integrations.lightning import GpulensCallback
    trainer = L.Trainer(callbacks=[GpulensCallback(job="resnet-a", data_dir="runs/")])

One step is one training batch. Data wait is the time from the end of a batch to the start of
the next one (Lightning fetches the batch in between; validation is left out). Samples are the
first dimension of the batch's first tensor; tokens the `input_ids` of a mapping batch (the
attention mask's sum when present). With automatic optimization Lightning runs forward and
backward inside the optimizer's step: backward then includes the update and the optimizer
time is absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpulens.integrations._common import batch_size, need, tokens

lightning = need("lightning", "gpulens.integrations.lightning", "pip install lightning")
from gpulens.torch.run import NullRun, Run, start  # noqa: E402


class GpulensCallback(lightning.pytorch.Callback):  # type: ignore[misc,name-defined]
    """Tracks the fit's training batches into a gpulens store (`job`, `data_dir` and the other
    options as in `gpulens.torch.track`)."""

    def __init__(
        self, job: str | None = None, data_dir: str | Path | None = None, **options: Any
    ) -> None:
        super().__init__()
        self.job = job
        self.data_dir = data_dir
        self.options = options
        self.run: Run | NullRun | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.run is not None:
            self.run.close()
        optimizers = list(getattr(trainer, "optimizers", []) or [])
        options = {"source": "gpulens.lightning", **self.options}
        optimizer = optimizers[0] if len(optimizers) == 1 else None
        self.run = start(self.job, self.data_dir, pl_module, optimizer, **options)

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.run is not None:
            self.run.batch_arrived()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.run is not None:
            self.run.step(samples=batch_size(batch), tokens=tokens(batch))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self.run is not None:
            self.run.restart_clock()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self.run is not None:
            self.run.restart_clock()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.run is not None:
            self.run.close()
