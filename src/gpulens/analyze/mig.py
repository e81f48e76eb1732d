"""MIG profiles per GPU model, and the smallest profile that fits a job (pure data + lookup).

Profiles from NVIDIA's MIG user guide ("Supported MIG profiles"), full-GPU profiles left out;
memory is the nominal size in the profile name (1g.10gb = 10 GB), a little under what the
slice really has, so a fit is conservative. `SMALLER_GPUS` is what to suggest for a model
without MIG.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulens.numbers import is_nan

GB = 1e9


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG profile: its name, share of the GPU's SMs and memory in bytes (nominal)."""

    name: str
    compute_fraction: float
    memory_bytes: float


def _profiles(spec: str, sevenths: bool = True) -> tuple[MigProfile, ...]:
    out = []
    for name in spec.split():
        g, mem = name.split(".")
        slices = int(g[:-1])
        out.append(MigProfile(name, slices / (7 if sevenths else 4), float(mem[:-2]) * GB))
    return tuple(out)


# NVIDIA MIG user guide, "Supported MIG profiles" (full-GPU profiles left out).
MIG_PROFILES: dict[str, tuple[MigProfile, ...]] = {
    "A100-40GB": _profiles("1g.5gb 1g.10gb 2g.10gb 3g.20gb 4g.20gb"),
    "A100-80GB": _profiles("1g.10gb 1g.20gb 2g.20gb 3g.40gb 4g.40gb"),
    "H100-80GB": _profiles("1g.10gb 1g.20gb 2g.20gb 3g.40gb 4g.40gb"),
    "H100-94GB": _profiles("1g.12gb 1g.24gb 2g.24gb 3g.47gb 4g.47gb"),
    "H200-141GB": _profiles("1g.18gb 1g.35gb 2g.35gb 3g.71gb 4g.71gb"),
    "A30-24GB": _profiles("1g.6gb 2g.12gb", sevenths=False),
}
# Smaller GPUs to suggest where a model has no MIG (name, memory bytes), smallest first.
SMALLER_GPUS: tuple[tuple[str, float], ...] = (
    ("NVIDIA T4", 16 * GB),
    ("NVIDIA L4", 24 * GB),
    ("NVIDIA A10", 24 * GB),
    ("NVIDIA L40S", 48 * GB),
)


def mig_family(gpu_model: str | None, memory_total_bytes: float | None) -> str | None:
    """The `MIG_PROFILES` key of a GPU model name (and total memory), or None without MIG."""
    name = (gpu_model or "").upper()
    total = memory_total_bytes if not is_nan(memory_total_bytes) else None
    if "H200" in name:
        return "H200-141GB"
    if "H100" in name or "H800" in name:
        big = "NVL" in name or "94GB" in name or (total is not None and total > 90 * GB)
        return "H100-94GB" if big else "H100-80GB"
    if "A100" in name or "A800" in name:
        small = "40GB" in name or (total is not None and total < 60 * GB)
        return "A100-40GB" if small else "A100-80GB"
    if "A30" in name:
        return "A30-24GB"
    return None


def pick_mig_profile(
    family: str | None,
    peak_bytes: float,
    activity: float,
    memory_margin: float = 1.1,
    target_activity: float = 0.8,
) -> MigProfile | None:
    """The smallest profile of `family` holding peak × margin and activity / target activity.

    `activity` is the job's mean activity on the whole GPU; a slice with a fraction f of the
    SMs would run at activity / f, which must stay at or below `target_activity`.
    """
    need_compute = activity / target_activity if not is_nan(activity) else 0.0
    for p in sorted(
        MIG_PROFILES.get(family or "", ()), key=lambda p: (p.compute_fraction, p.memory_bytes)
    ):
        if p.memory_bytes >= peak_bytes * memory_margin and p.compute_fraction >= need_compute:
            return p
    return None
