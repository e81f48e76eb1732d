"""Probes every source once and says whether it works here, and if not why and what to do."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """Whether one source works on this machine."""

    name: str
    works: bool
    detail: str
    fix: str = ""


def probe_simulated() -> SourceStatus:
    try:
        from gpulens.collect.simulated import SCENARIOS
    except Exception as exc:  # a broken install is worth reporting, not crashing on
        return SourceStatus("simulated", False, f"cannot load: {exc}", "reinstall gpulens")
    return SourceStatus(
        "simulated", True, f"simulated H100 fleet, {len(SCENARIOS)} scenarios (no GPU needed)"
    )


def probe_nvml() -> SourceStatus:
    from gpulens.collect.nvml.binding import NvmlError, NvmlLibraryMissing

    try:
        from gpulens.collect.nvml.pynvml_binding import PynvmlBinding

        binding = PynvmlBinding()
        binding.init()
    except NvmlLibraryMissing as exc:
        return SourceStatus(
            "nvml",
            False,
            str(exc),
            "install the NVIDIA driver (it provides libnvidia-ml.so) and `pip install "
            "nvidia-ml-py`; in a container, run with the NVIDIA container toolkit",
        )
    except NvmlError as exc:
        return SourceStatus("nvml", False, str(exc), "check `nvidia-smi` works on this machine")
    try:
        count = binding.device_count()
        names = [binding.device_info(i).name for i in range(count)]
        driver = binding.driver_version()
        gpm = [binding.gpm_supported(binding.device_info(i).uuid) for i in range(count)]
    except NvmlError as exc:
        return SourceStatus("nvml", False, str(exc), "check `nvidia-smi` works on this machine")
    finally:
        with contextlib.suppress(NvmlError):
            binding.shutdown()
    if count == 0:
        return SourceStatus("nvml", False, f"driver {driver} sees no GPU", "check `nvidia-smi -L`")
    profiling = (
        "profiling metrics via GPM"
        if all(gpm)
        else "no GPM profiling metrics (needs Hopper or newer; use DCGM for Volta-Ada)"
    )
    return SourceStatus(
        "nvml",
        True,
        f"driver {driver}, {count} GPU(s): {', '.join(sorted(set(names)))}; {profiling}",
    )


def probe_all() -> list[SourceStatus]:
    """Every source gpulens has, in the order `doctor` shows them."""
    return [probe_simulated(), probe_nvml()]
