"""Small builders shared by the store tests."""

from __future__ import annotations

from gpulens.model import Kind, Reading

DAY_NS = 86_400 * 1_000_000_000
T0 = 1_764_000_000 * 1_000_000_000  # 2025-11-24 16:00:00 UTC


def gpu(ts: int, uuid: str = "GPU-0", **values: float) -> Reading:
    return Reading(Kind.GPU, ts, {"host": "node1", "gpu_uuid": uuid, "gpu_index": "0"}, values)


def gpu_rows(n: int, start: int = T0, gpus: int = 4, step_ns: int = 1_000_000_000) -> list[Reading]:
    """n readings per GPU with distinct, exactly representable values."""
    out = []
    for i in range(n):
        for g in range(gpus):
            out.append(
                gpu(
                    start + i * step_ns + g * 1_000 + 7,
                    f"GPU-{g}",
                    sm_active_ratio=((i * 7 + g) % 100) / 100,
                    power_watts=100 + i + g / 4,
                    seq=float(i * gpus + g),
                )
            )
    return out
