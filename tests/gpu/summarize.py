"""Summary for run_on_gpu.sh (not a test): what gpulens measured for each workload.

    python3 tests/gpu/summarize.py WORKLOADS.jsonl GPU.csv PROCESS.csv

GPU.csv and PROCESS.csv are `gpulens query "SELECT epoch_ns(ts) AS ts_ns, * FROM gpu|process"
--format csv` output. For each workload: its process rows (joined on pid: ticks seen, memory,
per-process SM time share) and the mean duty cycle, SM activity, tensor activity, DRAM
activity and power of its GPU over its time window. Columns a GPU does not give print "n/a".
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from statistics import mean

GPU_COLUMNS = ("gpu_util_ratio", "sm_active_ratio", "tensor_active_ratio", "dram_active_ratio",
               "power_watts")  # fmt: skip


def _rows(path: str) -> list[dict[str, str]]:
    with Path(path).open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _mean(rows: list[dict[str, str]], column: str) -> str:
    values = [float(r[column]) for r in rows if r.get(column) not in (None, "", "NULL")]
    return f"{mean(values):.3f}" if values else "n/a"


def main() -> None:
    lines = Path(sys.argv[1]).read_text(encoding="utf-8").splitlines()
    workloads = [json.loads(line) for line in lines if line.strip()]
    gpu, proc = _rows(sys.argv[2]), _rows(sys.argv[3])
    header = ["workload", "pid", "proc ticks", "proc mem GiB", "proc sm share", "duty cycle",
              "SM active", "tensor active", "DRAM active", "power W"]  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for w in workloads:
        mine = [r for r in proc if r.get("pid") == str(w["pid"])]
        uuids = {r["gpu_uuid"] for r in mine}
        window = [
            r
            for r in gpu
            if w["start_ns"] <= int(r["ts_ns"]) <= w["end_ns"]
            and (r["gpu_uuid"] in uuids if uuids else r.get("gpu_index") == w["gpu"])
            and not r.get("parent_uuid")
        ]
        mem = [float(r["process_memory_used_bytes"]) for r in mine
               if r.get("process_memory_used_bytes")]  # fmt: skip
        cells = [w["name"], str(w["pid"]), str(len(mine)),
                 f"{max(mem) / 2**30:.2f}" if mem else "n/a",
                 _mean(mine, "process_sm_util_ratio")]  # fmt: skip
        cells += [_mean(window, c) for c in GPU_COLUMNS]
        print("| " + " | ".join(cells) + " |")
    if any(not [r for r in proc if r.get("pid") == str(w["pid"])] for w in workloads):
        print("\nA workload pid is missing from the process table: NVML reports host PIDs; "
              "if this runs in a container without the host PID namespace, the GPU columns "
              "above still hold (matched by GPU index and time window).")  # fmt: skip


if __name__ == "__main__":
    main()
