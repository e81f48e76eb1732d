"""Handing freed memory back to the system, for long-lived processes (the agent) and for
passes that follow a large read (pure standard library; Arrow only where it is loaded).

glibc keeps the heap an analysis freed, and Arrow's memory pool the buffers it released: without
this, an agent would hold its largest analysis' peak for the rest of its life.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys


def trim_heap() -> None:
    """Return glibc's free heap pages to the system (nothing to do elsewhere). Cheap enough
    for every refresh of the agent's live state."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL(None).malloc_trim(0)


def release_memory() -> None:
    """After a large read or analysis: collect cycles, release Arrow's unused pool memory (when
    pyarrow is loaded: it is not imported for this), then `trim_heap`."""
    gc.collect()
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.default_memory_pool().release_unused()
    trim_heap()
