"""Synthetic traces with known answers, shared by the trace-analysis unit tests."""

from __future__ import annotations

from typing import Any

Event = dict[str, Any]


def cpu(name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> Event:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def launch(ts: float, corr: int, dur: float = 2, name: str = "cudaLaunchKernel") -> Event:
    return cpu(name, ts, dur, cat="cuda_runtime", correlation=corr)


def gpu(
    name: str,
    ts: float,
    dur: float,
    corr: int,
    stream: int = 7,
    cat: str = "kernel",
    args: dict[str, Any] | None = None,
) -> Event:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"stream": stream, "correlation": corr, **(args or {})},
    }


LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def every_cause() -> list[Event]:
    """One device gap per cause (µs): data_loader 110, sync 15, launch_overhead 6,
    cpu_ops 137, gpu_wait 90, unknown 10; span 1010 → 1430; two ProfilerSteps."""
    return [
        cpu("ProfilerStep#1", 1000, 200, cat="user_annotation"),
        cpu("ProfilerStep#2", 1200, 250, cat="user_annotation"),
        launch(1000, 1),
        gpu("k1", 1010, 10, 1),
        cpu(LOADER, 1020, 100, cat="user_annotation"),
        launch(1125, 2),
        gpu("k2", 1130, 10, 2),
        launch(1135, 99, dur=7, name="cudaStreamSynchronize"),
        launch(1150, 3),
        gpu("k3", 1155, 5, 3),
        launch(1162, 4, dur=3),
        gpu("k4", 1166, 2, 4),
        cpu("aten::foo", 1168, 132),
        launch(1300, 5),
        gpu("k5", 1305, 5, 5),
        launch(1301, 6),
        gpu("k6", 1400, 10, 6),
        gpu("k7", 1420, 10, 777),  # no launch call in the trace
    ]


def cpu_bound(python: bool = True) -> list[Event]:
    """Two 20 µs kernels with 80 µs of host work between them: a Python function (or, without
    `python`, nothing profiled) running while the GPU is idle; GPU span 5 → 125."""
    host = [cpu("train.py(42): step", 25, 70, cat="python_function")] if python else []
    return [
        launch(0, 1),
        gpu("k1", 5, 20, 1),
        *host,
        launch(100, 2),
        gpu("k2", 105, 20, 2),
    ]


def launch_bound() -> list[Event]:
    """10 kernels of 2 µs, each launched by a 5 µs call after the previous one ended."""
    out: list[Event] = []
    for i in range(10):
        out += [launch(100 + 10 * i, i + 1, dur=5), gpu("k", 106 + 10 * i, 2, i + 1)]
    return out


def sync_heavy() -> list[Event]:
    return [
        launch(0, 1),
        gpu("k1", 10, 10, 1),
        launch(15, 90, dur=10, name="cudaStreamSynchronize"),
        launch(30, 2),
        gpu("k2", 40, 10, 2),
    ]


def comm_exposed() -> list[Event]:
    """compute [0,100) on stream 7; AllReduce [50,150) and [200,210) on stream 20."""
    return [
        launch(0, 1),
        gpu("volta_sgemm_128x64_nn", 0, 100, 1),
        launch(1, 2),
        gpu("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", 50, 100, 2, stream=20),
        launch(2, 3),
        gpu("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 200, 10, 3, stream=20),
    ]


def rank(compute_us: float, comm_us: float, r: int) -> list[Event]:
    """One rank of a 2-rank step: compute, then an all-reduce that ends at 200 µs."""
    return [
        launch(0, 1),
        gpu("sm80_xmma_gemm_bf16bf16_bf16f32", 0, compute_us, 1),
        launch(1, 2),
        gpu("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 200 - comm_us, comm_us, 2, stream=20),
    ]


def pageable_copies() -> list[Event]:
    return [
        launch(0, 1, name="cudaMemcpyAsync"),
        gpu("Memcpy HtoD (Pageable -> Device)", 5, 20, 1, cat="gpu_memcpy"),
        launch(1, 2),
        gpu("ampere_sgemm_128x64_nn", 25, 80, 2),
    ]
