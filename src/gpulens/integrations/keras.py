"""Keras 3 callback: the gpulens.torch tracker inside `model.fit()` on Keras's torch backend
(KERAS_BACKEND=torch).

    from gpulens.integrations.keras import GpulensCallback
    model.fit(x, y, batch_size=32, callbacks=[GpulensCallback(job="mlp-a", data_dir="runs/",
                                                              batch_size=32)])

One step is one training batch; data wait is the time from the end of a batch to the start of
the next. Keras calls its layers outside torch's module hooks, so forward, backward and
optimizer times are not measured; step FLOPs (torch's FlopCounterMode sees Keras's torch ops),
step time, data wait and throughput are. Keras does not tell callbacks the batch size: pass
`batch_size=` for samples/s.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from gpulens.integrations._common import need

keras = need(
    "keras", "gpulens.integrations.keras", "pip install keras torch, with KERAS_BACKEND=torch"
)
from gpulens.torch.run import NullRun, Run, start  # noqa: E402

log = logging.getLogger("gpulens.torch")


class GpulensCallback(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """Tracks `fit()`'s training batches into a gpulens store (`job`, `data_dir` and the other
    options as in `gpulens.torch.track`; `batch_size` for samples/s)."""

    def __init__(
        self,
        job: str | None = None,
        data_dir: str | Path | None = None,
        batch_size: int | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        self.job = job
        self.data_dir = data_dir
        self.batch_size = batch_size
        self.options = options
        self.run: Run | NullRun | None = None

    def on_train_begin(self, logs: Any = None) -> None:
        if keras.backend.backend() != "torch":  # say so once, never stop the fit
            log.warning(
                "gpulens: the Keras callback needs Keras's torch backend, got %r (set "
                "KERAS_BACKEND=torch before importing keras): nothing is recorded",
                keras.backend.backend(),
            )
            return
        if self.run is not None:
            self.run.close()
        options = {"source": "gpulens.keras", "device": self._device(), **self.options}
        self.run = start(self.job, self.data_dir, None, None, **options)

    def _device(self) -> str | None:
        """The device the model's weights live on (None: gpulens.torch decides)."""
        for weight in getattr(self.model, "weights", None) or []:
            device = getattr(getattr(weight, "value", None), "device", None)
            if device is not None:
                return str(device)
        return None

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.run is not None:
            self.run.batch_arrived()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.run is not None:
            self.run.step(samples=self.batch_size)

    def on_test_end(self, logs: Any = None) -> None:
        if self.run is not None:
            self.run.restart_clock()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self.run is not None:
            self.run.restart_clock()

    def on_train_end(self, logs: Any = None) -> None:
        if self.run is not None:
            self.run.close()
