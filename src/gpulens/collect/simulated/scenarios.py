"""The nine scenarios: each is a job (its ranks' stages, identity, app facts) and its truth.

Numbers are per rank. A training step is data wait → forward/backward (input copies and, for
DDP, bucketed all-reduce overlapped) → all-reduce tail → optimizer; a serving loop is host
scheduling → forward. Every job starts with a warm-up stage (compilation, autotuning, weight
loading or an engine build) while its memory ramps up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from gpulens.collect.simulated.phases import H100, Phase
from gpulens.collect.simulated.physics import IDLE_PHASE, StageSpec
from gpulens.collect.simulated.workloads import (
    GIB,
    MIB,
    AppSpec,
    JobSpec,
    allreduce,
    data_wait,
    fwd_bwd,
    llm_app,
    optimizer,
    steady_stage,
    train_warmup,
)

SCENARIOS: tuple[str, ...] = (
    "healthy_training",
    "input_bound_training",
    "eager_inference",
    "tensorrt_inference",
    "idle_allocated",
    "straggler_ddp",
    "memory_leak",
    "throttled",
    "fp32_training",
)

STATES: tuple[str, ...] = (
    "compute_tensor",
    "input_bound",
    "hollow_busy",
    "memory_bound",
    "idle_allocated",
    "idle_unallocated",
    "comm_bound",
    "throttled",
    "compute_fp32",
)


def healthy_training(gpus: int) -> JobSpec:
    steady = (
        data_wait(0.002, 6.0, 1.5e8),
        fwd_bwd(0.508, nvlink=6e10),
        allreduce(0.05, 6.0),
        optimizer(0.04, 6.0),
    )
    stages = (train_warmup(240.0, 52 * GIB), steady_stage(steady, 52 * GIB, 16))
    return JobSpec(
        "healthy_training",
        (stages,) * gpus,
        "pytorch",
        "python train.py",
        "llm-pretrain",
        "foundation",
        "trainer",
        "torch 2.5.1+cu124, NCCL 2.21.5",
        "compute_tensor",
        (),
        llm_app(16, 2048, 1.3e9, 24, 2048),
        48 * GIB,
    )


def input_bound_training(gpus: int) -> JobSpec:
    steady = (
        data_wait(0.85, 46.0, 1.6e9),
        Phase("h2d_copy", 0.04, copy=0.9, pcie_rx=4e9, cpu_cores=46.0, disk_read=1.6e9),
        fwd_bwd(
            0.55,
            kernel_us=120,
            gap_us=4.0,
            sm_cover=0.9,
            occupancy=0.4,
            tensor=0.45,
            fp32=0.12,
            fp16=0.05,
            integer=0.06,
            dram=0.45,
            pcie_rx=0.0,
            cpu_cores=46.0,
            disk_read=1.6e9,
        ),
        optimizer(0.06, 46.0),
    )
    stages = (train_warmup(150.0, 22 * GIB, cpu=8.0), steady_stage(steady, 22 * GIB, 256))
    app = AppSpec("samples", 256, 0, 25.6e6, 50, 0)
    return JobSpec(
        "input_bound_training",
        (stages,) * gpus,
        "pytorch",
        "python train_resnet.py",
        "vision-cls",
        "perception",
        "trainer",
        "torch 2.4.0+cu121, torchvision 0.19",
        "input_bound",
        ("input_bound",),
        app,
        96 * GIB,
    )


_SERVE_APP = AppSpec("samples", 32, 512, 335e6, 24, 1024)


def eager_inference(gpus: int) -> JobSpec:
    fwd = Phase(
        "forward",
        0.0435,
        kernel_us=20,
        gap_us=0.6,
        sm_cover=0.32,
        occupancy=0.2,
        tensor=0.12,
        fp32=0.1,
        fp16=0.05,
        integer=0.1,
        dram=0.72,
        pcie_rx=2e8,
        pcie_tx=5e7,
        cpu_cores=1.0,
    )
    load = Phase("load_weights", 6.0, copy=0.8, pcie_rx=1.2e10, cpu_cores=2.0, disk_read=2e9)
    warm = StageSpec("warmup", 90.0, (load, replace(fwd, seconds=4.0)), 14 * GIB, 0.5 * GIB)
    steady = steady_stage((Phase("schedule", 0.0015, cpu_cores=1.0), fwd), 14 * GIB, 32)
    app = replace(_SERVE_APP, latency_p50_s=0.062, latency_p99_s=0.145)
    return JobSpec(
        "eager_inference",
        ((warm, steady),) * gpus,
        "pytorch",
        "python serve.py",
        "search-embed",
        "search",
        "server",
        "torch 2.5.1+cu124 (eager)",
        "hollow_busy",
        ("hollow_busy", "move_to_tensorrt"),
        app,
        12 * GIB,
        network_bytes_per_sample=(4096.0, 8192.0),
    )


def tensorrt_inference(gpus: int) -> JobSpec:
    infer = Phase(
        "infer",
        0.0114,
        kernel_us=160,
        gap_us=6.0,
        sm_cover=0.85,
        occupancy=0.45,
        tensor=0.45,
        fp32=0.06,
        fp16=0.1,
        integer=0.05,
        dram=0.75,
        pcie_rx=5e8,
        pcie_tx=1.2e8,
        cpu_cores=1.0,
    )
    build = (
        Phase(
            "tactic_timing",
            3.5,
            kernel_us=300,
            gap_us=120,
            sm_cover=0.8,
            occupancy=0.4,
            tensor=0.5,
            fp16=0.1,
            dram=0.5,
            cpu_cores=1.0,
        ),
        Phase("build_host", 1.5, cpu_cores=1.0),
    )
    warm = StageSpec("warmup", 240.0, build, 9 * GIB, 0.5 * GIB)
    steady = steady_stage((Phase("schedule", 0.0006, cpu_cores=1.0), infer), 9 * GIB, 32)
    app = replace(_SERVE_APP, latency_p50_s=0.016, latency_p99_s=0.031)
    return JobSpec(
        "tensorrt_inference",
        ((warm, steady),) * gpus,
        "tensorrt",
        "tritonserver",
        "search-embed",
        "search",
        "triton",
        "TensorRT 10.6.0, Triton 24.11",
        "memory_bound",
        (),
        app,
        10 * GIB,
        network_bytes_per_sample=(4096.0, 8192.0),
    )


def idle_allocated(gpus: int) -> JobSpec:
    cell = Phase(
        "cell",
        6.0,
        kernel_us=200,
        gap_us=50,
        sm_cover=0.8,
        occupancy=0.3,
        tensor=0.3,
        fp32=0.1,
        dram=0.4,
        cpu_cores=1.0,
    )
    warm = StageSpec(
        "warmup", 150.0, (Phase("think", 24.0, cpu_cores=0.05), cell), 60 * GIB, 0.5 * GIB
    )
    steady = StageSpec(
        "steady", None, (replace(IDLE_PHASE, cpu_cores=0.02),), 60 * GIB, idle_clocks=True
    )
    return JobSpec(
        "idle_allocated",
        ((warm, steady),) * gpus,
        "pytorch",
        "python -m ipykernel",
        "notebooks",
        "research",
        "jupyter",
        "torch 2.5.1+cu124, jupyterlab 4.2",
        "idle_allocated",
        ("idle_allocated",),
        None,
        8 * GIB,
    )


def straggler_ddp(gpus: int) -> JobSpec:
    slow = gpus // 2
    locked_mhz = 1515
    stretch = H100.max_sm_clock_mhz / locked_mhz
    fast = (
        data_wait(0.002, 6.0, 1.5e8),
        fwd_bwd(0.5, nvlink=6e10),
        Phase(
            "allreduce_wait",
            0.5 * stretch - 0.5,
            kernel_us=1000,
            gap_us=2.0,
            sm_cover=0.12,
            occupancy=0.05,
            integer=0.02,
            dram=0.02,
            nvlink=2e9,
            cpu_cores=6.0,
        ),
        allreduce(0.06, 6.0),
        optimizer(0.04, 6.0),
    )
    slow_steady = (fast[0], replace(fast[1], seconds=0.5 * stretch), fast[3], fast[4])
    ranks = tuple(
        (
            train_warmup(240.0, 52 * GIB),
            steady_stage(slow_steady if r == slow else fast, 52 * GIB, 16),
        )
        for r in range(gpus)
    )
    states = {r: ("compute_tensor" if r == slow else "comm_bound") for r in range(gpus)}
    return JobSpec(
        "straggler_ddp",
        ranks,
        "pytorch",
        "python train.py",
        "llm-pretrain",
        "foundation",
        "trainer",
        "torch 2.5.1+cu124, NCCL 2.21.5",
        "comm_bound",
        ("straggler",),
        llm_app(16, 2048, 1.3e9, 24, 2048),
        48 * GIB,
        clock_locks={slow: locked_mhz},
        slow_rank=slow,
        rank_states=states,
    )


LEAK_BYTES_PER_SECOND = 1.6 * MIB
LEAK_RESTART_S = 600.0


def memory_leak(gpus: int) -> JobSpec:
    level = 34 * GIB
    usable = H100.memory_total_bytes - H100.memory_reserved_bytes
    to_oom = (usable - level) / LEAK_BYTES_PER_SECOND
    steady = (
        data_wait(0.003, 6.0, 1.5e8),
        fwd_bwd(0.405, kernel_us=300, gap_us=2.5),
        optimizer(0.042, 6.0),
    )
    stages = (
        train_warmup(180.0, level),
        StageSpec(
            "steady",
            to_oom,
            steady,
            level,
            leak_bytes_per_second=LEAK_BYTES_PER_SECOND,
            samples_per_period=8,
        ),
        StageSpec("down", LEAK_RESTART_S, (IDLE_PHASE,), process=False, idle_clocks=True),
    )
    return JobSpec(
        "memory_leak",
        (stages,) * gpus,
        "pytorch",
        "python finetune.py",
        "chat-sft",
        "assistant",
        "trainer",
        "torch 2.3.1+cu121",
        "compute_tensor",
        ("memory_leak",),
        llm_app(8, 1024, 350e6, 24, 1024),
        24 * GIB,
    )


def throttled(gpus: int) -> JobSpec:
    steady = (
        fwd_bwd(
            0.46,
            kernel_us=900,
            gap_us=2.0,
            sm_cover=0.99,
            occupancy=0.5,
            tensor=0.82,
            fp32=0.1,
            fp16=0.03,
            dram=0.6,
            pcie_rx=2e8,
        ),
        optimizer(0.04, 6.0),
    )
    stages = (train_warmup(180.0, 70 * GIB), steady_stage(steady, 70 * GIB, 4))
    return JobSpec(
        "throttled",
        (stages,) * gpus,
        "pytorch",
        "python train.py",
        "llm-pretrain",
        "foundation",
        "trainer",
        "torch 2.5.1+cu124",
        "throttled",
        ("throttled",),
        llm_app(4, 2048, 2.7e9, 32, 2560),
        40 * GIB,
        thermal_resistance=0.095,
    )


def fp32_training(gpus: int) -> JobSpec:
    steady = (
        data_wait(0.005, 8.0, 3e8),
        fwd_bwd(
            1.12,
            kernel_us=500,
            gap_us=3.0,
            sm_cover=0.95,
            occupancy=0.55,
            tensor=0.01,
            fp32=0.76,
            fp16=0.0,
            integer=0.08,
            dram=0.4,
            pcie_rx=4e8,
            cpu_cores=8.0,
            disk_read=3e8,
        ),
        optimizer(0.075, 8.0),
    )
    stages = (train_warmup(120.0, 40 * GIB), steady_stage(steady, 40 * GIB, 128))
    return JobSpec(
        "fp32_training",
        (stages,) * gpus,
        "pytorch",
        "python train_vit.py",
        "vision-vit",
        "perception",
        "trainer",
        "torch 2.5.1+cu124 (amp off)",
        "compute_fp32",
        ("low_tensor_use",),
        AppSpec("samples", 128, 197, 86e6, 12, 768),
        32 * GIB,
    )


def light_inference(gpus: int) -> JobSpec:
    """A small model served at a low request rate on a whole H100: kernels run about a tenth
    of the time and 3 GiB of 80 are used ("GPU too powerful": a MIG slice would do)."""
    forward = Phase(
        "forward",
        0.03,
        kernel_us=120,
        gap_us=4.0,
        sm_cover=0.7,
        occupancy=0.35,
        tensor=0.35,
        fp32=0.05,
        fp16=0.1,
        dram=0.4,
        pcie_rx=1e8,
        pcie_tx=2e7,
        cpu_cores=0.5,
    )
    wait = replace(IDLE_PHASE, name="wait_for_requests", seconds=0.27, cpu_cores=0.05)
    load = Phase("load_weights", 4.0, copy=0.6, pcie_rx=2e9, cpu_cores=1.0, disk_read=5e8)
    warm = StageSpec("warmup", 60.0, (load, replace(forward, seconds=2.0)), 3 * GIB, 0.3 * GIB)
    steady = steady_stage((wait, forward), 3 * GIB, 8)
    app = replace(_SERVE_APP, latency_p50_s=0.031, latency_p99_s=0.052)
    return JobSpec(
        "light_inference",
        ((warm, steady),) * gpus,
        "pytorch",
        "python serve_classifier.py",
        "support-bot",
        "assistant",
        "server",
        "torch 2.5.1+cu124",
        "busy",
        ("overprovisioned",),
        app,
        4 * GIB,
        network_bytes_per_sample=(2048.0, 512.0),
    )


#: scenarios a fleet runs only when asked for by name (not in the default mix)
EXTRA_SCENARIOS: tuple[str, ...] = ("light_inference",)

# name → (builder, preferred GPUs, minimum GPUs)
BUILDERS: Mapping[str, tuple[Callable[[int], JobSpec], int, int]] = {
    "healthy_training": (healthy_training, 4, 2),
    "input_bound_training": (input_bound_training, 1, 1),
    "eager_inference": (eager_inference, 1, 1),
    "tensorrt_inference": (tensorrt_inference, 1, 1),
    "idle_allocated": (idle_allocated, 1, 1),
    "straggler_ddp": (straggler_ddp, 4, 2),
    "memory_leak": (memory_leak, 1, 1),
    "throttled": (throttled, 1, 1),
    "fp32_training": (fp32_training, 1, 1),
    "light_inference": (light_inference, 1, 1),
}


def check_names(names: list[str]) -> None:
    """Raise ValueError naming an unknown scenario and listing the valid ones."""
    for name in names:
        if name not in BUILDERS:
            known = ", ".join((*SCENARIOS, *EXTRA_SCENARIOS))
            raise ValueError(f"unknown scenario {name!r}: expected one of {known}")
