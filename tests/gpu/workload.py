"""GPU workloads for run_on_gpu.sh (not a test): a tensor-core-bound loop and a starved one.

    python3 tests/gpu/workload.py matmul|starved SECONDS OUT.jsonl

`matmul`: back-to-back bf16 8192² matmuls (tensor-core bound: high duty cycle, SM and tensor
activity). `starved`: a small kernel, then the CPU sleeps 20 ms, as a loader-bound loop does
(duty cycle well below 1, SM and tensor activity near 0). After warm-up each appends one JSON
line {name, pid, gpu, start_ns, end_ns, iterations} to OUT.jsonl, so the summary can match
gpulens' readings by pid and by time window.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    import torch  # type: ignore[import-not-found, unused-ignore]

    name, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    dev = torch.device("cuda:0")
    if name == "matmul":
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)

        def step() -> None:
            for _ in range(8):
                torch.matmul(a, b)
            torch.cuda.synchronize()

    elif name == "starved":
        x = torch.randn(256, 256, device=dev)

        def step() -> None:
            torch.matmul(x, x)
            torch.cuda.synchronize()
            time.sleep(0.02)  # waiting for the next batch on the CPU

    else:
        raise SystemExit(f"unknown workload {name!r}: expected matmul or starved")
    step()  # warm-up: context, kernels, clocks
    start = time.time_ns()
    end_at = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end_at:
        step()
        n += 1
    record = {
        "name": name,
        "pid": os.getpid(),
        "gpu": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0],
        "start_ns": start,
        "end_ns": time.time_ns(),
        "iterations": n,
    }
    with Path(out).open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    print(f"{name}: pid {os.getpid()}, {n} iterations in {seconds:.0f} s", flush=True)


if __name__ == "__main__":
    main()
