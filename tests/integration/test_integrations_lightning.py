"""The Lightning callback end to end on the CPU: a tiny LightningModule fits a few batches,
its readings reach the store and a report, with the step FLOPs of its Linear layers."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch")

from tests.integration.integrations_check import check, run_script

SCRIPT = """
import sys, torch, lightning as L
from gpulens.integrations.lightning import GpulensCallback
torch.manual_seed(0)
class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, 4))
    def forward(self, x):
        return self.net(x)
    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
ds = torch.utils.data.TensorDataset(torch.randn(12 * 16, 32), torch.randint(0, 4, (12 * 16,)))
cb = GpulensCallback(job="pl-tiny", data_dir=sys.argv[1], interval_s=0.3)
trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, callbacks=[cb], logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
trainer.fit(Tiny(), torch.utils.data.DataLoader(ds, batch_size=16))
print(cb.run.steps, cb.run.step_flops)
"""


def test_lightning_callback(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    out = run_script(SCRIPT, store)
    steps, flops = out.split()[-2:]
    assert int(steps) == 12
    # forward 2·in·out per sample, backward ×2 except the first layer's input gradient
    hand = 16 * (6 * 32 * 64 + 6 * 64 * 4 - 2 * 32 * 64)
    assert float(flops) == pytest.approx(hand, rel=0.01)
    entry = check(store, "pl-tiny", "gpulens.lightning", 12)
    assert entry["samples_per_second"] > 0 and entry["batch_size"] == 16
    assert entry["step_flops"] == pytest.approx(hand, rel=0.01)
    assert entry["forward_seconds"] > 0 and entry["backward_seconds"] > 0
    assert entry["optimizer_seconds"] is None  # Lightning's closure: not separable
