"""The Hugging Face Trainer callback end to end on the CPU: a tiny BERT built from a config (no
download, HF_HUB_OFFLINE=1) trains a few steps; its readings reach the store and a report,
with tokens from the Trainer's count of input tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("torch")

from tests.integration.integrations_check import check, run_script

SCRIPT = """
import sys, torch
from transformers import (BertConfig, BertForSequenceClassification, Trainer,
                          TrainingArguments)
from gpulens.integrations.hf import GpulensCallback
torch.manual_seed(0)
cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=64, num_labels=2)
model = BertForSequenceClassification(cfg)
class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 48
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (16,), generator=g),
                "attention_mask": torch.ones(16, dtype=torch.long), "labels": torch.tensor(i % 2)}
args = TrainingArguments(output_dir=sys.argv[1] + "-out", per_device_train_batch_size=8,
                         num_train_epochs=1, report_to=[], use_cpu=True, save_strategy="no",
                         disable_tqdm=True, logging_steps=2,
                         include_num_input_tokens_seen="all")
cb = GpulensCallback(job="bert-tiny", data_dir=sys.argv[1], interval_s=0.3)
Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[cb]).train()
print(cb.run.steps, cb.run.step_flops)
"""


def test_hf_callback(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    out = run_script(SCRIPT, store)
    steps, flops = out.split()[-2:]
    assert int(steps) == 6 and float(flops) > 0
    entry = check(store, "bert-tiny", "gpulens.hf", 6)
    assert entry["batch_size"] == 8
    # 8 sequences of 16 tokens per step
    assert entry["tokens_per_second"] == pytest.approx(entry["samples_per_second"] * 16, rel=0.01)
    assert entry["forward_seconds"] > 0 and entry["optimizer_seconds"] > 0
