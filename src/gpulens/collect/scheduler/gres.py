"""GPU counts from Slurm's gres and TRES strings (pure).

Some clusters leave ``gres/gpu`` out of ``AccountingStorageTRES``: their TRES totals
(``tres_alloc_str``, ``tres.allocated``) carry no GPU at all, and the count is only in
``gres_detail``, ``tres_per_job``/``tres_per_node`` or the submit line. So the count is read
from the first of these that names a GPU.
"""

from __future__ import annotations

import re

_GPU_TRES = re.compile(r"(?:^|,)gres/gpu(?::[^=,]*)?=(\d+)")
_SUBMIT_GPUS = re.compile(r"(?:--gpus[= ]|-G ?)(?:[A-Za-z0-9_.-]+:)?(\d+)")
_SUBMIT_PER_NODE = re.compile(r"--gpus-per-node[= ](?:[A-Za-z0-9_.-]+:)?(\d+)")
_SUBMIT_GRES = re.compile(r"--gres[= ]gpu(?::[A-Za-z0-9_.-]+)?:(\d+)")


def split_outside_parens(text: str) -> list[str]:
    """``a(1,2),b`` → [``a(1,2)``, ``b``]."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def gres_gpus(text: str) -> float | None:
    """GPUs in a gres list (``gpu:h100:4(IDX:0-3)``, ``gpu:4``, ``gres/gpu:h100:1``); None
    when it names no GPU."""
    total, seen = 0.0, False
    for item in split_outside_parens(text or ""):
        spec = item.split("(", 1)[0].strip()
        if spec.startswith("gres/"):
            spec = spec[5:]
        fields = spec.split(":")
        if fields[0] != "gpu":
            continue
        seen = True
        total += float(fields[-1]) if len(fields) > 1 and fields[-1].isdigit() else 1.0
    return total if seen else None


def tres_gpus(text: str) -> float | None:
    """GPUs in a TRES string (``cpu=4,mem=8G,gres/gpu=2``); None when it has none. Typed
    entries (``gres/gpu:a100=2``) repeat the untyped total and are read only without it."""
    untyped = re.search(r"(?:^|,)gres/gpu=(\d+)", text or "")
    if untyped:
        return float(untyped.group(1))
    typed = _GPU_TRES.findall(text or "")
    return float(sum(int(x) for x in typed)) if typed else None


def submit_line_gpus(line: str, nodes: float) -> float | None:
    """GPUs asked for on an sbatch/srun line (``--gpus 4``, ``--gpus-per-node h100:1``,
    ``--gres gpu:2``); None when it asks for none."""
    if m := _SUBMIT_GPUS.search(line or ""):
        return float(m.group(1))
    if m := _SUBMIT_PER_NODE.search(line or ""):
        return float(m.group(1)) * max(nodes, 1.0)
    if m := _SUBMIT_GRES.search(line or ""):
        return float(m.group(1)) * max(nodes, 1.0)
    return None
