"""What the callbacks share: importing a framework with one clear error, batch sizes."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any


def need(module: str, what: str, install: str) -> ModuleType:
    """Import `module`, or one ImportError that says what needs it and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f"{what} needs {module}, which is not installed in this environment: {install}"
        ) from None


def batch_size(batch: Any) -> int | None:
    """Samples in a batch: the first dimension of its first tensor (in a tuple, list or
    mapping, searched depth-first), None when there is none."""
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    items: Any = batch.values() if isinstance(batch, Mapping) else batch
    if isinstance(items, (list, tuple)) or isinstance(batch, Mapping):
        for item in items:
            found = batch_size(item)
            if found is not None:
                return found
    return None


def tokens(batch: Any) -> int | None:
    """Tokens in a batch that carries `input_ids` (a mapping, as tokenizers make): its
    element count, or the attention mask's sum when there is one. None otherwise."""
    if not isinstance(batch, Mapping) or "input_ids" not in batch:
        return None
    mask = batch.get("attention_mask")
    if mask is not None and hasattr(mask, "sum"):
        return int(mask.sum())
    ids = batch["input_ids"]
    return int(ids.numel()) if hasattr(ids, "numel") else None
