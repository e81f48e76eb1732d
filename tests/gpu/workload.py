"""GPU workloads for run_on_gpu.sh (not a test): a tensor-core-bound loop and a starved one.

    python3 tests/gpu/workload.py matmul|starved|tracked SECONDS OUT.jsonl [DATA_DIR]

`matmul`: back-to-back bf16 8192² matmuls (tensor-core bound: high duty cycle, SM and tensor
activity). `starved`: a small kernel, then the CPU sleeps 20 ms, as a loader-bound loop does
(duty cycle well below 1, SM and tensor activity near 0). `tracked`: the matmul loop as a
training loop under gpulens.torch (an `nn.Linear` in bf16, 8 per step, a starved fetch every
4th step), writing app readings into DATA_DIR (the agent's store) under the job that
GPULENS_JOB gives the process, so telemetry and app readings join. After warm-up each appends
one JSON line {name, pid, gpu, start_ns, end_ns, iterations} to OUT.jsonl, so the summary can
match gpulens' readings by pid and by time window.
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

    elif name == "tracked":
        _tracked(seconds, out, sys.argv[4])
        return
    else:
        raise SystemExit(f"unknown workload {name!r}: expected matmul, starved or tracked")
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


def _tracked(seconds: float, out: str, data_dir: str) -> None:
    import torch  # type: ignore[import-not-found, unused-ignore]

    import gpulens.torch as gt

    dev = torch.device("cuda:0")
    layer = torch.nn.Linear(8192, 8192, bias=False, device=dev, dtype=torch.bfloat16)
    x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)

    def batches():  # a loader that is slow every 4th batch
        i = 0
        while True:
            if i % 4 == 3:
                time.sleep(0.03)
            i += 1
            yield x

    start = time.time_ns()
    end_at = time.monotonic() + seconds
    with torch.no_grad(), gt.track(data_dir=data_dir, model=layer, interval_s=1.0) as run:
        for batch in run.wrap(batches()):
            for _ in range(8):
                layer(batch)
            torch.cuda.synchronize()  # a loss.item() of a real loop
            run.step(samples=batch.shape[0], tokens=batch.shape[0])
            if time.monotonic() >= end_at:
                break
    record = {"name": "tracked", "pid": os.getpid(), "job": run.job, "start_ns": start,
              "gpu": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0],
              "end_ns": time.time_ns(), "iterations": run.steps}  # fmt: skip
    with Path(out).open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    print(f"tracked: pid {os.getpid()}, job {run.job}, {run.steps} steps", flush=True)


if __name__ == "__main__":
    main()
