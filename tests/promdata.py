"""A cluster whose history is known by construction, as dcgm-exporter series backfilled into a
real Prometheus (`promtool tsdb create-blocks-from openmetrics`), and a Prometheus to serve it.

The cluster: `nodes` nodes of `gpus` GPUs, node i in partition `q<i % queues>` (the label a
site's relabelling adds to every series of a node). Time is cut into `block_s` blocks; in
each block a GPU is free, held by a training job (duty 95 %, SM 0.7, tensor 0.45, 40 GiB) or
held by an idle job (duty 0, SM 0, 20 GiB in use), by a fixed rule of (node, GPU, block).
Held blocks carry dcgm-exporter's `hpc_job` label, as on Slurm. One node can have a gap: its
exporter is down for `gap_blocks` blocks (no samples: no data). Ten families per GPU, sampled
at `scrape_s`, each sample in the middle of its scrape interval (so no sample sits on a step
boundary, which a range selector would count in two steps).

`truth(spec, step_s)` computes the GPU-hours the report must find from the same rule, and the
coverage rule of the interval frame (a reading covers until the next one, at most two steps;
the last one covers one step).
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
MIB = 2**20


@dataclass(frozen=True)
class ClusterSpec:
    nodes: int = 4
    gpus: int = 2
    queues: int = 2
    start_s: int = 1_790_812_800  # 2026-10-01T00:00:00Z
    days: float = 30.0
    scrape_s: int = 900
    block_s: int = 6 * 3600
    gap_node: int | None = 3
    gap_block: int = 41  # from 06:00, inside a UTC day
    gap_blocks: int = 2

    @property
    def end_s(self) -> int:
        return self.start_s + round(self.days * 86400)

    @property
    def blocks(self) -> int:
        return (self.end_s - self.start_s) // self.block_s

    def queue(self, node: int) -> str:
        return f"q{node % self.queues}"

    def host(self, node: int) -> str:
        return f"gpu-node-{node:03d}"

    def state(self, node: int, gpu: int, block: int) -> str:
        """free, train or idle: a fixed rule, different per GPU and block."""
        k = (block * 7 + node * 3 + gpu * 5) % 8
        if k in (0, 1, 2):
            return "free"
        if k == 3:
            return "idle"
        return "train"

    def observed(self, node: int, block: int) -> bool:
        if self.gap_node is None or node != self.gap_node:
            return True
        return not self.gap_block <= block < self.gap_block + self.gap_blocks


_FAMILIES = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge"),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge"),
    ("DCGM_FI_DEV_FB_USED", "gauge"),
    ("DCGM_FI_DEV_FB_FREE", "gauge"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter"),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge"),
)
#: per state: duty %, SM, tensor, DRAM, memory MiB, power W, SM clock MHz, temperature °C
_LEVELS = {
    "free": (0.0, 0.0, 0.0, 0.0, 0.0, 70.0, 210.0, 32.0),
    "idle": (0.0, 0.0, 0.0, 0.0, 20480.0, 90.0, 1980.0, 36.0),
    "train": (95.0, 0.7, 0.45, 0.35, 40960.0, 560.0, 1980.0, 65.0),
}
TOTAL_MIB = 81559.0


def write_openmetrics(spec: ClusterSpec, path: Path, nodes: range | None = None) -> int:
    """The cluster's samples (of `nodes`, default all) as OpenMetrics text; the samples."""
    nodes = nodes if nodes is not None else range(spec.nodes)
    per_block = spec.block_s // spec.scrape_s
    offsets = [spec.scrape_s // 2 + i * spec.scrape_s for i in range(per_block)]
    count = 0
    with path.open("w", encoding="ascii") as out:
        for f_index, (family, kind) in enumerate(_FAMILIES):
            out.write(f"# TYPE {family} {kind}\n")
            for node in nodes:
                host, queue = spec.host(node), spec.queue(node)
                for gpu in range(spec.gpus):
                    uuid = f"GPU-{node:04d}{gpu:04d}-0000-0000-0000-000000000000"
                    base = (f'gpu="{gpu}",UUID="{uuid}",modelName="NVIDIA H100 80GB HBM3",'
                            f'Hostname="{host}",partition="{queue}"')  # fmt: skip
                    energy = 0.0
                    lines: list[str] = []
                    for block in range(spec.blocks):
                        state = spec.state(node, gpu, block)
                        t0 = spec.start_s + block * spec.block_s
                        if kind == "counter":  # energy grows with power, even unobserved
                            power = _LEVELS[state][5]
                        if not spec.observed(node, block):
                            if kind == "counter":
                                energy += power * spec.block_s * 1000
                            continue
                        labels = (
                            base if state == "free" else f'{base},hpc_job="{node}-{gpu}-{block}"'
                        )
                        value = _value(f_index, state, block, gpu)
                        for off in offsets:
                            if kind == "counter":
                                energy += power * spec.scrape_s * 1000
                                value = energy
                            lines.append(f"{family}{{{labels}}} {value:g} {t0 + off}\n")
                    out.writelines(lines)
                    count += len(lines)
        out.write("# EOF\n")
    return count


def _value(f_index: int, state: str, block: int, gpu: int) -> float:
    duty, sm, tensor, dram, mem, power, clock, temp = _LEVELS[state]
    return (
        duty,
        sm,
        tensor,
        dram,
        mem,
        TOTAL_MIB - mem,
        power,
        0.0,
        clock,
        temp + (block + gpu) % 3,
    )[f_index]


@dataclass(frozen=True)
class Truth:
    gpu_hours: float
    allocated_hours: float
    idle_allocated_hours: float
    train_hours: float
    by_queue: dict[str, tuple[float, float]]  # queue → (GPU-hours, allocated GPU-hours)
    gpus: int
    hosts: set[str]


def truth(
    spec: ClusterSpec, step_s: int, start_s: int | None = None, end_s: int | None = None
) -> Truth:
    """The GPU-hours a report at `step_s` over [start, end) must find (see the module doc)."""
    lo = start_s if start_s is not None else spec.start_s
    hi = end_s if end_s is not None else spec.end_s
    per_block = spec.block_s // step_s
    total = alloc = idle = train = 0.0
    by_queue: dict[str, list[float]] = {}
    for node in range(spec.nodes):
        steps: list[tuple[int, str]] = []  # observed steps: (start, state)
        for block in range(spec.blocks):
            if not spec.observed(node, block):
                continue
            for i in range(per_block):
                t = spec.start_s + block * spec.block_s + i * step_s
                if lo <= t < hi:
                    steps.append((t, ""))
        for gpu in range(spec.gpus):
            q = by_queue.setdefault(spec.queue(node), [0.0, 0.0])
            for i, (t, _) in enumerate(steps):
                nxt = steps[i + 1][0] if i + 1 < len(steps) else t + step_s
                covered = min(nxt - t, 2 * step_s) / 3600
                state = spec.state(node, gpu, (t - spec.start_s) // spec.block_s)
                total += covered
                q[0] += covered
                if state != "free":
                    alloc += covered
                    q[1] += covered
                    if state == "idle":
                        idle += covered
                    else:
                        train += covered
    return Truth(
        total, alloc, idle, train, {k: (v[0], v[1]) for k, v in by_queue.items()},
        spec.nodes * spec.gpus, {spec.host(n) for n in range(spec.nodes)},
    )  # fmt: skip


def backfill(spec: ClusterSpec, data_dir: Path, work: Path, nodes_per_file: int = 0) -> int:
    """promtool create-blocks-from openmetrics of the cluster into `data_dir` (in files of
    `nodes_per_file` nodes, 0: one file); the samples written."""
    data_dir.mkdir(parents=True, exist_ok=True)
    per = nodes_per_file or spec.nodes
    written = 0
    for first in range(0, spec.nodes, per):
        text = work / f"backfill-{first}.om"
        written += write_openmetrics(spec, text, range(first, min(first + per, spec.nodes)))
        subprocess.run(
            [
                PROMTOOL,
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "--max-block-duration=720h",
                str(text),
                str(data_dir),
            ],
            check=True,
            capture_output=True,
        )
        text.unlink()
    return written


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    """Debian's Prometheus on a free loopback port over `data_dir`, scraping `targets`."""

    def __init__(self, home: Path, data_dir: Path, config: dict[str, Any] | None = None) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = config or {"global": {"scrape_interval": "15s"}}
        home.mkdir(parents=True, exist_ok=True)
        (home / "prometheus.yml").write_text(json.dumps(config), encoding="utf-8")
        self.log = home / "prometheus.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={home / 'prometheus.yml'}",
                    f"--storage.tsdb.path={data_dir}",
                    "--storage.tsdb.retention.time=3650d",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Prometheus did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.3)

    @classmethod
    def with_config(cls, home: Path, config: dict[str, Any]) -> Prometheus:
        """A Prometheus with its own empty TSDB under `home`, running `config`."""
        return cls(home, home / "data", config)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> Prometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def iter_lines(path: Path) -> Iterator[str]:
    with path.open(encoding="ascii") as f:
        yield from f
