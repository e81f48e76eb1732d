"""The simulated fleet: hosts × GPUs, jobs placed on them, and the factories other code uses.

The fleet is exactly `hosts` × `gpus_per_host` GPUs; `placement.plan` decides which job runs
where (the default mix holds all nine scenarios from three hosts of four GPUs up, and says in
`unplaced` what a smaller fleet leaves out).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

from gpulens.clock import Clock
from gpulens.collect.nvml.binding import DeviceInfo
from gpulens.collect.simulated import noise
from gpulens.collect.simulated.binding import SimulatedBinding
from gpulens.collect.simulated.exposition import render
from gpulens.collect.simulated.gpu import PlacedJob, SimGpu
from gpulens.collect.simulated.host import SimulatedHostCollector, SimulatedIdentity
from gpulens.collect.simulated.phases import H100
from gpulens.collect.simulated.physics import GpuModel
from gpulens.collect.simulated.placement import plan
from gpulens.collect.simulated.scenarios import BUILDERS, SCENARIOS, check_names
from gpulens.collect.simulated.truth import ground_truth
from gpulens.collect.simulated.workloads import JobSpec
from gpulens.model import Reading, event

DEFAULT_START_NS = 1_764_000_000 * 1_000_000_000  # FakeClock's default start
DRIVER_VERSION = "550.90.07"
USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy")
_PCI_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


def _uuid(host_index: int, gpu_index: int) -> str:
    a = noise.key(0xC0FFEE, host_index, gpu_index)
    b = noise.mix(a)
    h = f"{a:016x}{b:016x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _bus(gpu_index: int) -> str:
    bus = _PCI_BUSES[gpu_index] if gpu_index < len(_PCI_BUSES) else f"{0xE0 + gpu_index:02X}"
    return f"00000000:{bus}:00.0"


class SimulatedFleet:
    """A seeded, deterministic fleet; every value at time t depends only on (seed, t)."""

    def __init__(
        self,
        hosts: int = 2,
        gpus_per_host: int = 4,
        seed: int = 0,
        scenarios: Sequence[str] | None = None,
        start_ns: int = DEFAULT_START_NS,
        gpm: bool = True,
    ) -> None:
        if hosts < 1 or not 1 <= gpus_per_host <= 16:
            raise ValueError(
                f"need hosts >= 1 and 1 <= gpus_per_host <= 16, got {hosts} and {gpus_per_host}"
            )
        if isinstance(scenarios, str):
            raise ValueError(f"scenarios must be a list of names, got the string {scenarios!r}")
        if scenarios is not None:
            check_names(list(scenarios))
        self.seed = seed
        self.start_ns = start_ns
        self.gpm = gpm
        self.gpus_per_host = gpus_per_host
        placement, self.unplaced = plan(scenarios, hosts, gpus_per_host)
        self.hosts: list[str] = [f"sim-node-{i}" for i in range(hosts)]
        self.jobs: list[PlacedJob] = []
        owner: dict[tuple[int, int], tuple[PlacedJob, int]] = {}
        slots = [0] * hosts
        for index, (name, h, gpus) in enumerate(placement):
            spec = BUILDERS[name][0](len(gpus))
            job = self._place(index, spec, h, gpus, slots[h])
            slots[h] += 1
            self.jobs.append(job)
            for rank, g in enumerate(gpus):
                owner[(h, g)] = (job, rank)
        self._event_cache: dict[tuple[int, int], list[tuple[int, str, str]]] = {}
        self._gpus: dict[str, list[SimGpu]] = {
            name: [self._gpu(h, g, owner.get((h, g))) for g in range(gpus_per_host)]
            for h, name in enumerate(self.hosts)
        }

    def _place(self, index: int, spec: JobSpec, h: int, gpus: list[int], slot: int) -> PlacedJob:
        job_id = f"sim-{1001 + index}"
        user = USERS[index % len(USERS)]
        jitter = (noise.uniform(noise.key(self.seed, 0x5747), index) + 1.0) * 5.0
        labels = {
            "process_name": spec.process_name,
            "user": user,
            "project": spec.project,
            "team": spec.team,
            "job_id": job_id,
            "container": spec.container,
            "pod": f"{spec.project}-{1001 + index}-0",
            "pod_uid": _pod_uid(self.seed, index),
            "namespace": spec.team,
            "engine": spec.engine,
        }
        return PlacedJob(
            index,
            job_id,
            spec,
            self.hosts[h],
            slot,
            tuple(gpus),
            tuple(_uuid(h, g) for g in gpus),
            10.0 + 20.0 * index + jitter,
            user,
            labels,
        )

    def _gpu(self, h: int, g: int, owner: tuple[PlacedJob, int] | None) -> SimGpu:
        info = DeviceInfo(
            index=g,
            uuid=_uuid(h, g),
            name=H100.name,
            pci_bus_id=_bus(g),
            memory_total_bytes=H100.memory_total_bytes,
            power_limit_mw=int(H100.power_limit_w * 1000),
            max_sm_clock_mhz=H100.max_sm_clock_mhz,
            max_memory_clock_mhz=H100.max_mem_clock_mhz,
            architecture=H100.architecture,
            compute_capability=H100.compute_capability,
        )
        key = noise.key(self.seed, h, g)
        if owner is None:
            model = GpuModel(H100, key, None, start_ns=self.start_ns)
            return SimGpu(info, self.hosts[h], model, None, 0, None)
        job, rank = owner
        spec = job.spec
        device = H100
        if spec.thermal_resistance is not None:
            device = dataclasses.replace(H100, thermal_resistance_c_per_w=spec.thermal_resistance)
        locked = spec.clock_locks.get(rank)
        ceiling = 1.0 if locked is None else locked / H100.max_sm_clock_mhz
        model = GpuModel(
            device, key, job.start_s, spec.ranks[rank], ceiling, start_ns=self.start_ns
        )
        return SimGpu(info, self.hosts[h], model, job, rank, locked)

    # -- the API ----------------------------------------------------------------------------------
    @staticmethod
    def scenario_names() -> tuple[str, ...]:
        return SCENARIOS

    def gpus(self, host: str) -> list[SimGpu]:
        """The simulated GPUs of `host`, by index."""
        try:
            return self._gpus[host]
        except KeyError:
            raise ValueError(
                f"unknown host {host!r}: the fleet has {', '.join(self.hosts)}"
            ) from None

    def binding(self, host: str, clock: Clock) -> SimulatedBinding:
        """An NVML binding for `host` that answers for `clock.now_ns()`."""
        return SimulatedBinding(self.gpus(host), clock, DRIVER_VERSION, gpm=self.gpm)

    def identity(self, host: str) -> SimulatedIdentity:
        self.gpus(host)
        return SimulatedIdentity([j for j in self.jobs if j.host == host])

    def host_collector(self, host: str) -> SimulatedHostCollector:
        return SimulatedHostCollector(self, host)

    def render_dcgm_exporter(self, host: str, now_ns: int) -> str:
        """dcgm-exporter's text exposition for `host` at `now_ns`."""
        return render(self.gpus(host), now_ns, DRIVER_VERSION, self.gpm)

    def ground_truth(self) -> list[dict[str, Any]]:
        """What a correct analysis must conclude, per job and per unallocated GPU."""
        return ground_truth(self)

    def events(self, host: str, after_ns: int, until_ns: int) -> list[Reading]:
        """Job events on `host` with after_ns < ts <= until_ns, oldest first."""
        out: list[tuple[int, str, str, dict[str, str]]] = []
        for job in self.jobs:
            if job.host != host:
                continue
            model = self.gpus(host)[job.gpu_indices[0]].model
            start = self.start_ns + round(job.start_s * 1e9)
            epoch_ns = None if model.epoch_s is None else round(model.epoch_s * 1e9)
            first = 0 if epoch_ns is None else max(0, (after_ns - start) // epoch_ns)
            last = 0 if epoch_ns is None else max(0, (until_ns - start) // epoch_ns)
            for n in range(first, last + 1):
                base = start + n * (epoch_ns or 0)
                cached = self._event_cache.get((job.index, n))
                if cached is None:
                    cached = self._event_cache[(job.index, n)] = self._job_events(
                        job, model, n, base
                    )
                for ts, name, message in cached:
                    if after_ns < ts <= until_ns:
                        out.append((ts, name, message, {"host": host, **job.labels}))
        out.sort(key=lambda e: e[0])
        return [event(ts, name, message, labels) for ts, name, message, labels in out]

    @staticmethod
    def _job_events(
        job: PlacedJob, model: GpuModel, n: int, base: int
    ) -> list[tuple[int, str, str]]:
        spec = job.spec
        gpus = ", ".join(str(g) for g in job.gpu_indices)
        verb = "started" if n == 0 else f"restarted (attempt {n + 1})"
        out = [
            (
                base,
                "job_start" if n == 0 else "job_restart",
                f"job {job.job_id} {verb}: {spec.scenario} on GPU {gpus}",
            ),
            (base + 1_000_000, "version", spec.version),
        ]
        warm_end = base + round(model.stages[0].end * 1e9)
        if spec.engine == "tensorrt":
            out.append(
                (
                    warm_end,
                    "engine_build",
                    f"TensorRT engine built in {model.stages[0].end:.0f} s (fp16)",
                )
            )
        if spec.app is not None and spec.app.latency_p50_s > 0:
            out.append(
                (
                    warm_end + 1_000_000,
                    "deploy",
                    f"model {spec.project} deployed with {spec.engine}",
                )
            )
        for stage in model.stages:
            if stage.spec.name == "down":
                out.append(
                    (
                        base + round(stage.start * 1e9),
                        "oom",
                        "CUDA out of memory: process exited, restarting in "
                        f"{stage.end - stage.start:.0f} s",
                    )
                )
        return out


def _pod_uid(seed: int, index: int) -> str:
    """A deterministic Kubernetes-style pod UID for simulated job `index`."""
    digest = hashlib.sha256(f"gpulens-sim-pod:{seed}:{index}".encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
