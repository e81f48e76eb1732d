"""The profile name of a MIG instance (`1g.20gb`) from what an nvidia-smi XML dump that names
no profile (the v12 schema of driver 535) says of it: its SM count and memory, against its
parent's memory.

A profile `<g>g.<m>gb` has g compute slices and a memory share of the GPU's nominal memory
(the `80GB` of its name, else its memory in GiB) in eighths (quarters on an A30), named in
whole GB. Only for the GPUs whose SMs per compute slice are known (A100 and A30: 14; H100,
H200 and GH200: 16); None otherwise, or when a figure is missing.
"""

from __future__ import annotations

import math
import re

_SMS_PER_SLICE: tuple[tuple[str, int], ...] = (
    ("GH200", 16),
    ("H200", 16),
    ("H100", 16),
    ("A100", 14),
    ("A30", 14),
)
_NOMINAL = re.compile(r"(\d+)\s*GB\b", re.IGNORECASE)
MIB = 1 << 20


def profile(
    model: str, sms: float | None, memory_bytes: float | None, gpu_memory_bytes: float | None
) -> str | None:
    """`<g>g.<m>gb` of a MIG instance of a `model` GPU; None when it cannot be told."""
    upper = model.upper()
    per = next((n for key, n in _SMS_PER_SLICE if re.search(rf"\b{key}\b", upper)), None)
    if per is None or not sms or not memory_bytes or not gpu_memory_bytes:
        return None
    slices = round(sms / per)
    parts = 4 if re.search(r"\bA30\b", upper) else 8
    share = round(memory_bytes / (gpu_memory_bytes / parts))
    if not 1 <= slices <= 7 or not 1 <= share <= parts:
        return None
    named = _NOMINAL.search(model)
    nominal = float(named.group(1)) if named else gpu_memory_bytes / (1024 * MIB)
    return f"{slices}g.{math.floor(share * nominal / parts + 0.5)}gb"
