"""Handing freed memory back to the system, for long-lived processes (the agent) and for
passes that follow a large read (pure standard library; Arrow only where it is loaded).

glibc keeps the heap an analysis freed, and Arrow's memory pool the buffers it released: without
this, an agent would hold its largest analysis' peak for the rest of its life.

Long-running processes also put Arrow's allocations on glibc's heap (`arrow_on_system_heap`):
pyarrow's default pool, mimalloc, keeps many small buffers in pages of its own, so a compaction
pass of the agent (a few hundred 10 s segments) raised its resident memory by ~34 MB at its
peak, against ~14 MB on glibc's heap, at no cost in CPU (bench/README.md, the fifth round).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys

POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


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


def arrow_on_system_heap() -> bool:
    """Make Arrow allocate from glibc's heap (its "system" pool), which `trim_heap` hands back,
    in this process and the children it starts, unless ARROW_DEFAULT_MEMORY_POOL chooses.
    False when the variable was set already."""
    if POOL_VARIABLE in os.environ:
        return False
    os.environ[POOL_VARIABLE] = "system"  # read once, at pyarrow's import (here or a child's)
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.set_memory_pool(arrow.system_memory_pool())
    return True
