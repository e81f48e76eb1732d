"""The Keras 3 callback end to end on Keras's torch backend (KERAS_BACKEND=torch, set before
Keras is imported, in a fresh interpreter): a tiny model fits a few batches, its readings reach
the store and a report; torch's FlopCounterMode counts Keras's torch ops."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

if importlib.util.find_spec("keras") is None:  # importing it here would pick its default backend
    pytest.skip("keras is not installed", allow_module_level=True)
pytest.importorskip("torch")

from tests.integration.integrations_check import check, run_script

SCRIPT = """
import sys
import numpy as np, keras
assert keras.backend.backend() == "torch"
from gpulens.integrations.keras import GpulensCallback
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(4)])
model.compile(optimizer="sgd",
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x = np.random.randn(10 * 16, 32).astype("float32")
y = np.random.randint(0, 4, 10 * 16)
cb = GpulensCallback(job="keras-tiny", data_dir=sys.argv[1], batch_size=16, interval_s=0.3)
model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[cb])
print(cb.run.steps, cb.run.step_flops)
"""


def test_keras_callback(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    out = run_script(SCRIPT, store, env={"KERAS_BACKEND": "torch"})
    steps, flops = out.split()[-2:]
    assert int(steps) == 10
    hand = 16 * (6 * 32 * 64 + 6 * 64 * 4 - 2 * 32 * 64)
    assert float(flops) == pytest.approx(hand, rel=0.01)
    entry = check(store, "keras-tiny", "gpulens.keras", 10)
    assert entry["samples_per_second"] > 0 and entry["batch_size"] == 16
    assert entry["forward_seconds"] is None  # Keras runs its layers outside torch's hooks
