"""Probes every source once and says whether it works here, and if not why and what to do.

Each check runs under a deadline (`probe_all`'s `deadline_s`): a source that does not answer
in time is reported as not working, and the check is left behind in a daemon thread.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: how long one check of `probe_all` may take
CHECK_DEADLINE_S = 10.0


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


def probe_dcgm(
    urls: Sequence[str], timeout_s: float = 2.0, max_page_bytes: int | None = None
) -> SourceStatus:
    """Works when every URL serves, within `timeout_s` and `max_page_bytes`, a page that parses
    as exposition text with GPU series."""
    if not urls:
        return SourceStatus(
            "dcgm",
            False,
            "no dcgm-exporter URL configured",
            "run NVIDIA dcgm-exporter and set dcgm.urls (e.g. http://127.0.0.1:9400/metrics)",
        )
    import httpx

    from gpulens.collect.dcgm.parse import parse_exposition
    from gpulens.collect.dcgm.scrape import MAX_PAGE_BYTES, get_page, public_url
    from gpulens.errors import GpulensError
    from gpulens.model import Kind

    limit = MAX_PAGE_BYTES if max_page_bytes is None else max_page_bytes
    failures, found = [], []
    with httpx.Client(follow_redirects=True) as client:
        for url in urls:
            name = public_url(url)
            try:
                page = get_page(client, url, timeout_s, limit)
                gpus = {
                    (r.labels.get("host"), r.labels.get("gpu_uuid"))
                    for r in parse_exposition(page, name, time.time_ns()).readings
                    if r.kind is Kind.GPU
                }
            except httpx.HTTPError as exc:
                failures.append(f"{name}: {type(exc).__name__}: {str(exc).replace(url, name)}")
                continue
            except GpulensError as exc:
                failures.append(str(exc))
                continue
            if not gpus:
                failures.append(
                    f"{name}: answers, but its page has no GPU series (DCGM_FI_*): is it "
                    "dcgm-exporter's /metrics?"
                )
                continue
            found.append(f"{name}: {len(gpus)} GPU(s)")
    if failures:
        return SourceStatus(
            "dcgm",
            False,
            "; ".join(failures),
            "check that dcgm-exporter is running, reachable from here and serving its "
            "/metrics page at that URL",
        )
    return SourceStatus("dcgm", True, "; ".join(found))


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


def within(
    name: str, deadline_s: float, check: Callable[[], list[SourceStatus]]
) -> list[SourceStatus]:
    """`check()`'s statuses, or one saying that `name` gave no answer within `deadline_s` (the
    check goes on in a daemon thread, which does not keep the process alive)."""
    done: list[list[SourceStatus]] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(check())
        except Exception as exc:  # a check that breaks is a finding, not a crash of doctor
            failed.append(exc)

    thread = threading.Thread(target=run, name=f"gpulens-probe-{name}", daemon=True)
    thread.start()
    thread.join(deadline_s)
    if done:
        return done[0]
    if failed:
        exc = failed[0]
        return [SourceStatus(name, False, f"the check failed: {type(exc).__name__}: {exc}")]
    return [
        SourceStatus(
            name,
            False,
            f"no answer within {deadline_s:g} s",
            "the source hangs: check it by hand (for dcgm, curl its URL)",
        )
    ]


def probe_all(
    dcgm_urls: Sequence[str] = (),
    nvidia_smi_binary: str = "nvidia-smi",
    *,
    dcgm_timeout_s: float = 2.0,
    max_page_bytes: int | None = None,
    deadline_s: float = CHECK_DEADLINE_S,
) -> list[SourceStatus]:
    """Every source gpulens has, in the order `doctor` shows them, each check within
    `deadline_s` (the dcgm check within `dcgm_timeout_s` per URL, as the collector)."""
    dcgm_deadline = max(deadline_s, dcgm_timeout_s * len(dcgm_urls) + 1.0)
    return [
        *within("simulated", deadline_s, lambda: [probe_simulated()]),
        *within("nvml", deadline_s, probe_nvml),
        *within("nvidia_smi", deadline_s, lambda: [probe_nvidia_smi(nvidia_smi_binary)]),
        *within(
            "dcgm",
            dcgm_deadline,
            lambda: [probe_dcgm(dcgm_urls, dcgm_timeout_s, max_page_bytes)],
        ),
        *within("host", deadline_s, lambda: [probe_host()]),
        *within("attribution", deadline_s, lambda: [probe_attribution()]),
    ]
