"""Building blocks of the scenarios: job and app descriptions, and the phases jobs are made of.

Numbers are per rank. A training step is data wait → forward/backward (input copies and, for
DDP, bucketed all-reduce overlapped) → all-reduce tail → optimizer. Every training job starts
with a warm-up (compilation, autotuning) while its memory ramps up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpulens.collect.simulated.phases import Phase
from gpulens.collect.simulated.physics import StageSpec

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class AppSpec:
    """What the job's own instrumentation reports (absent fields are not reported)."""

    throughput: str = "samples"  # "samples" or "tokens"
    batch_size: int = 0
    sequence_length: int = 0
    parameters: float = 0.0
    layers: int = 0
    hidden_size: int = 0
    latency_p50_s: float = 0.0
    latency_p99_s: float = 0.0


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job of a scenario, before it is placed on GPUs."""

    scenario: str
    ranks: tuple[tuple[StageSpec, ...], ...]
    engine: str
    process_name: str
    project: str
    team: str
    container: str
    version: str
    state: str
    findings: tuple[str, ...]
    app: AppSpec | None = None
    cpu_rss_bytes: float = 16 * GIB
    thermal_resistance: float | None = None
    clock_locks: Mapping[int, int] = field(default_factory=dict)  # rank → locked SM MHz
    slow_rank: int | None = None
    rank_states: Mapping[int, str] = field(default_factory=dict)
    network_bytes_per_sample: tuple[float, float] = (0.0, 0.0)  # rx, tx

    @property
    def gpus(self) -> int:
        return len(self.ranks)


# -- phase building blocks ----------------------------------------------------------------------
FWD_BWD = Phase(
    "forward_backward",
    0.5,
    kernel_us=350,
    gap_us=2.0,
    sm_cover=0.97,
    occupancy=0.45,
    tensor=0.68,
    fp32=0.08,
    fp16=0.02,
    integer=0.05,
    dram=0.35,
    pcie_rx=1.2e9,
    cpu_cores=6.0,
    disk_read=1.5e8,
)


def fwd_bwd(seconds: float, **changes: Any) -> Phase:
    """Forward and backward kernels of a bf16 transformer step (next batch copied meanwhile)."""
    return replace(FWD_BWD, seconds=seconds, **changes)


def optimizer(seconds: float, cpu: float) -> Phase:
    return Phase(
        "optimizer",
        seconds,
        kernel_us=60,
        gap_us=1.0,
        sm_cover=0.9,
        occupancy=0.5,
        fp32=0.35,
        integer=0.1,
        dram=0.7,
        cpu_cores=cpu,
    )


def allreduce(seconds: float, cpu: float) -> Phase:
    return Phase(
        "allreduce",
        seconds,
        kernel_us=800,
        gap_us=4.0,
        sm_cover=0.2,
        occupancy=0.1,
        fp32=0.05,
        integer=0.1,
        dram=0.25,
        nvlink=2.4e11,
        cpu_cores=cpu,
    )


def data_wait(seconds: float, cpu: float, disk: float) -> Phase:
    return Phase("data_wait", seconds, data_wait=True, cpu_cores=cpu, disk_read=disk)


def train_warmup(seconds: float, memory: float, cpu: float = 1.5) -> StageSpec:
    """Compilation and autotuning: low, bursty activity while memory ramps up."""
    phases = (
        Phase("compile", 6.0, cpu_cores=cpu),
        Phase(
            "autotune",
            2.5,
            kernel_us=40,
            gap_us=25,
            sm_cover=0.5,
            occupancy=0.2,
            tensor=0.15,
            fp32=0.15,
            dram=0.3,
            cpu_cores=cpu,
        ),
        Phase(
            "first_steps",
            1.5,
            kernel_us=200,
            gap_us=20,
            sm_cover=0.8,
            occupancy=0.3,
            tensor=0.3,
            fp32=0.1,
            dram=0.35,
            cpu_cores=cpu,
        ),
    )
    return StageSpec("warmup", seconds, phases, memory, memory_from=0.5 * GIB)


def steady_stage(phases: tuple[Phase, ...], memory: float, samples: float) -> StageSpec:
    """The steady state: runs until the end of time with constant memory."""
    return StageSpec("steady", None, phases, memory, samples_per_period=samples)


def llm_app(batch: int, seq: int, params: float, layers: int, hidden: int) -> AppSpec:
    return AppSpec("tokens", batch, seq, params, layers, hidden)
