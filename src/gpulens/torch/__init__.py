"""gpulens inside the training process: data wait, step phases, throughput, MFU and memory of
a PyTorch training loop, written as `app` readings into a gpulens store (docs/torch.md).

    import gpulens.torch as gt
    with gt.track(job="resnet-a", data_dir="runs/", model=model, optimizer=opt) as run:
        for x, y in run.wrap(loader):
            ...
            run.step(samples=x.shape[0])

An optional extra: it needs PyTorch (`pip install torch`); nothing else in gpulens does.
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError:
    raise ImportError(
        "gpulens.torch needs PyTorch, which is not installed in this environment: install it "
        "(pip install torch, or the gpulens[torch] extra) or leave gpulens.torch unimported"
    ) from None

from gpulens.torch.inference import Inference, inference
from gpulens.torch.run import NullRun, Run, disabled, start, track

__all__ = ["Inference", "NullRun", "Run", "disabled", "inference", "start", "track"]
