"""Counting the synchronising CUDA calls a piece of code makes (for the -m gpu tests)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any


def count_syncs(fn: Callable[[], Any]) -> int:
    """Synchronising calls `fn` makes, as torch's sync debug mode reports them."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message).lower() for w in caught)
