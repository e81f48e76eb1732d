"""Probes every source once and says whether it works here, and if not why and what to do."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """Whether one source (or one tier of metrics) works on this machine."""

    name: str
    works: bool
    detail: str
    fix: str = ""


_PROFILING_FIX = (
    "profiling metrics (SM, tensor and DRAM activity) need NVML GPM on Hopper or newer, or "
    "DCGM on Volta to Ada: run dcgm-exporter with DCGM_FI_PROF_* counters enabled and add "
    "'dcgm' to collect.collectors"
)


def probe_simulated() -> SourceStatus:
    try:
        from gpulens.collect.simulated import SCENARIOS
    except Exception as exc:  # a broken install is worth reporting, not crashing on
        return SourceStatus("simulated", False, f"cannot load: {exc}", "reinstall gpulens")
    return SourceStatus(
        "simulated", True, f"simulated H100 fleet, {len(SCENARIOS)} scenarios (no GPU needed)"
    )


def probe_nvml() -> list[SourceStatus]:
    """The NVML source and, where it works, its profiling tier per GPU model."""
    from gpulens.collect.nvml.binding import NvmlError, NvmlLibraryMissing

    try:
        from gpulens.collect.nvml.pynvml_binding import PynvmlBinding

        binding = PynvmlBinding()
        binding.init()
    except NvmlLibraryMissing as exc:
        return [
            SourceStatus(
                "nvml",
                False,
                str(exc),
                "install the NVIDIA driver (it provides libnvidia-ml.so) and `pip install "
                "nvidia-ml-py`; in a container, run with the NVIDIA container toolkit",
            )
        ]
    except NvmlError as exc:
        return [SourceStatus("nvml", False, str(exc), "check that `nvidia-smi` works here")]
    try:
        count = binding.device_count()
        infos = [binding.device_info(i) for i in range(count)]
        driver = binding.driver_version()
        gpm = {info.name: binding.gpm_supported(info.uuid) for info in infos}
    except NvmlError as exc:
        return [SourceStatus("nvml", False, str(exc), "check that `nvidia-smi` works here")]
    finally:
        with contextlib.suppress(NvmlError):
            binding.shutdown()
    if count == 0:
        return [
            SourceStatus("nvml", False, f"driver {driver} sees no GPU", "check `nvidia-smi -L`")
        ]
    models = ", ".join(sorted(gpm))
    out = [SourceStatus("nvml", True, f"driver {driver}, {count} GPU(s): {models}")]
    for model, supported in sorted(gpm.items()):
        arch = next(i.architecture for i in infos if i.name == model)
        if supported:
            out.append(
                SourceStatus("nvml: profiling", True, f"{model}: SM, tensor, DRAM activity via GPM")
            )
        else:
            out.append(
                SourceStatus(
                    "nvml: profiling",
                    False,
                    f"{model} ({arch}): no GPM, so duty cycle, memory, power and clocks only",
                    _PROFILING_FIX,
                )
            )
    return out


def probe_nvidia_smi(binary: str = "nvidia-smi") -> SourceStatus:
    path = shutil.which(binary)
    if path is None:
        return SourceStatus(
            "nvidia_smi",
            False,
            f"{binary} is not on PATH",
            "install the NVIDIA driver utilities (only needed where the NVML bindings cannot load)",
        )
    return SourceStatus("nvidia_smi", True, f"found at {path} (fallback when NVML cannot load)")


def probe_dcgm(urls: Sequence[str], timeout_s: float = 2.0) -> SourceStatus:
    if not urls:
        return SourceStatus(
            "dcgm",
            False,
            "no dcgm-exporter URL configured",
            "run NVIDIA dcgm-exporter and set dcgm.urls (e.g. http://127.0.0.1:9400/metrics)",
        )
    import httpx

    failures = []
    for url in urls:
        try:
            response = httpx.get(url, timeout=timeout_s)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            failures.append(f"{url}: {type(exc).__name__}: {exc}")
    if failures:
        return SourceStatus(
            "dcgm",
            False,
            "; ".join(failures),
            "check that dcgm-exporter is running and reachable from here",
        )
    return SourceStatus("dcgm", True, f"{len(urls)} endpoint(s) answer")


def probe_host() -> SourceStatus:
    try:
        import psutil
    except ImportError:
        return SourceStatus("host", False, "psutil is not installed", "pip install psutil")
    return SourceStatus("host", True, f"psutil {psutil.__version__}, {psutil.cpu_count()} CPUs")


def probe_attribution(proc_root: Path = Path("/proc")) -> SourceStatus:
    from gpulens.collect.procs.attribution import ProcAttribution

    try:
        view = ProcAttribution(proc_root).namespace
    except Exception as exc:  # unreadable /proc: report, don't crash doctor
        return SourceStatus("attribution", False, f"{proc_root}: {exc}", "mount /proc")
    if view.sees_host_pids:
        return SourceStatus("attribution", True, f"host PID namespace ({view.reason})")
    return SourceStatus(
        "attribution",
        False,
        view.reason,
        "run gpulens in the host PID namespace (Docker --pid=host, Kubernetes hostPID: true)",
    )


def probe_all(
    dcgm_urls: Sequence[str] = (), nvidia_smi_binary: str = "nvidia-smi"
) -> list[SourceStatus]:
    """Every source gpulens has, in the order `doctor` shows them."""
    return [
        probe_simulated(),
        *probe_nvml(),
        probe_nvidia_smi(nvidia_smi_binary),
        probe_dcgm(dcgm_urls),
        probe_host(),
        probe_attribution(),
    ]
