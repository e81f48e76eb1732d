"""The host side of a simulated node: process identity, host/process counters, app metrics, events.

Host and process values come from the same closed-form integrals as the GPU ones (data loader
CPU, input reads and request traffic are columns of each phase), so they agree with what the
GPUs show at the same moment. Events are edge-triggered: each `collect` returns the events
since the previous call (since the fleet start on the first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpulens.collect.simulated import noise
from gpulens.collect.simulated.gpu import PlacedJob, SimGpu, decode_pid
from gpulens.collect.simulated.layout import FleetLayout
from gpulens.collect.simulated.phases import CPU, DISK, LAUNCH, SAMPLES, WAIT, Row
from gpulens.collect.simulated.physics import ORIGIN_S
from gpulens.model import FrozenLabels, Kind, Reading

CPU_COUNT = 48
MEMORY_TOTAL = 2 * 1024**4
_BASE_CPU_CORES = 1.0
_BASE_MEMORY = 24 * 1024**3
_BASE_DISK_READ, _BASE_DISK_WRITE, _BASE_NET = 5e6, 2e6, 1e6  # bytes/s


class SimulatedIdentity:
    """Implements ProcessIdentity: the labels of a simulated job's PID, {} for any other."""

    def __init__(self, jobs: Sequence[PlacedJob]) -> None:
        self._by_slot = {j.slot: j for j in jobs}

    def identify(self, pid: int) -> Mapping[str, str]:
        slot, rank = decode_pid(pid)
        job = self._by_slot.get(slot)
        if job is None or rank >= len(job.gpu_indices):
            return {}
        return dict(job.labels)


class SimulatedHostCollector:
    """A Collector for one simulated host: HOST, PROCESS, APP and EVENT readings."""

    name = "simulated_host"

    def __init__(self, fleet: FleetLayout, host: str) -> None:
        self._fleet = fleet
        self._host = host
        self._gpus = fleet.gpus(host)
        self._jobs = [j for j in fleet.jobs if j.host == host]
        self._key = noise.key(fleet.seed, 0x4057, fleet.hosts.index(host))
        self._host_labels = FrozenLabels({"host": host})
        self._proc_labels: dict[str, tuple[int, FrozenLabels]] = {}  # uuid → (pid, labels)
        self._apps = [_AppPlan(job, host, self._gpus) for job in self._jobs]
        self._last_event_ns = fleet.start_ns - 1
        self._epoch_base: dict[tuple[str, int], Row] = {}

    def close(self) -> None:
        return None

    def collect(self, now_ns: int) -> list[Reading]:
        out = [self._host_reading(now_ns)]
        out.extend(self._process_readings(now_ns))
        out.extend(self._app_readings(now_ns))
        if now_ns > self._last_event_ns:
            out.extend(self._fleet.events(self._host, self._last_event_ns, now_ns))
            self._last_event_ns = now_ns
        return out

    def _host_reading(self, now: int) -> Reading:
        x = (now - self._fleet.start_ns) / 1e9 - ORIGIN_S
        cores = _BASE_CPU_CORES
        read, net_rx, net_tx, disk_rate = _BASE_DISK_READ * x, _BASE_NET * x, _BASE_NET * x, 0.0
        memory = float(_BASE_MEMORY)
        for g in self._gpus:
            snap = g.snap(now)
            cores += float(snap.mean[CPU])
            disk_rate += float(snap.mean[DISK])
            read += float(snap.total[DISK])
            if g.job is not None:
                rx, tx = g.job.spec.network_bytes_per_sample
                net_rx += rx * float(snap.total[SAMPLES])
                net_tx += tx * float(snap.total[SAMPLES])
                if snap.process:
                    memory += g.job.spec.cpu_rss_bytes
        u = noise.uniform(self._key, now // 1_000_000_000)
        write = _BASE_DISK_WRITE * x
        values = {
            "host_cpu_util_ratio": min(1.0, cores / CPU_COUNT * (1.0 + 0.01 * u)),
            "host_cpu_iowait_ratio": 0.002 + 0.01 * disk_rate / 1e9,
            "host_cpu_count": float(CPU_COUNT),
            "host_load1": cores * (1.0 + 0.03 * u),
            "host_memory_used_bytes": memory,
            "host_memory_total_bytes": float(MEMORY_TOTAL),
            "host_disk_read_bytes_total": float(int(read)),
            "host_disk_write_bytes_total": float(int(write)),
            "host_disk_reads_total": float(int(read / 131_072)),
            "host_disk_writes_total": float(int(write / 65_536)),
            "host_network_rx_bytes_total": float(int(net_rx)),
            "host_network_tx_bytes_total": float(int(net_tx)),
        }
        return Reading(Kind.HOST, now, self._host_labels, values)

    def _since_epoch(self, g: SimGpu, epoch: int, total: Row) -> Row:
        """Integrals since the process (re)started: process counters start at zero."""
        key = (g.uuid, epoch)
        base = self._epoch_base.get(key)
        if base is None:
            assert g.job is not None
            period = g.model.epoch_s or 0.0
            start = self._fleet.start_ns + round((g.job.start_s + epoch * period) * 1e9)
            base = g.model.integral(start)
            self._epoch_base = {k: v for k, v in self._epoch_base.items() if k[0] != g.uuid}
            self._epoch_base[key] = base
        return total - base

    def _process_labels(self, g: SimGpu, pid: int, job: PlacedJob) -> FrozenLabels:
        """The labels of `pid` on `g`, built once per process start."""
        cached = self._proc_labels.get(g.uuid)
        if cached is not None and cached[0] == pid:
            return cached[1]
        labels = FrozenLabels({"host": self._host, "pid": str(pid), **job.labels})
        self._proc_labels[g.uuid] = (pid, labels)
        return labels

    def _process_readings(self, now: int) -> list[Reading]:
        out = []
        for g in self._gpus:
            pid = g.pid(now)
            if pid is None or g.job is None:
                continue
            snap = g.snap(now)
            since = self._since_epoch(g, snap.epoch, snap.total)
            values = {
                "process_cpu_seconds_total": float(since[CPU]),
                "process_rss_bytes": g.job.spec.cpu_rss_bytes / len(g.job.gpu_indices),
                "process_read_bytes_total": float(int(since[DISK])),
            }
            out.append(Reading(Kind.PROCESS, now, self._process_labels(g, pid, g.job), values))
        return out

    def _app_readings(self, now: int) -> list[Reading]:
        out = []
        for plan in self._apps:
            app = plan.job.spec.app
            ranks = plan.ranks
            lead = ranks[0].snap(now)
            if app is None or lead.stage is None or not lead.process:
                continue
            if plan.serving and lead.stage.spec.name != "steady":
                continue
            mean = lead.stage.schedule.mean
            u = noise.uniform(self._key, now // 1_000_000_000, plan.job.index + 1)
            samples = 0.0
            for g in ranks:
                stage = g.snap(now).stage
                if stage is not None:
                    samples += float(stage.schedule.mean[SAMPLES]) * (1.0 + 0.02 * u)
            values: dict[str, float] = {
                "app_step_seconds": lead.stage.schedule.period * (1.0 + 0.01 * u),
                "app_data_wait_ratio": float(mean[WAIT]),
                "app_samples_per_second": samples,
            }
            if app.throughput == "tokens":
                values["app_tokens_per_second"] = samples * app.sequence_length
            if plan.serving:
                values["app_latency_p50_seconds"] = app.latency_p50_s * (1.0 + 0.03 * u)
                values["app_latency_p99_seconds"] = app.latency_p99_s * (1.0 + 0.08 * abs(u))
            values.update(plan.facts)
            out.append(Reading(Kind.APP, now, plan.labels, values))
            for g, rank_labels in zip(ranks, plan.rank_labels, strict=True):
                launches = float(g.snap(now).mean[LAUNCH])
                out.append(
                    Reading(
                        Kind.APP, now, rank_labels, {"app_kernel_launches_per_second": launches}
                    )
                )
        return out


class _AppPlan:
    """What one job's app readings need that never changes: GPUs, labels, model facts."""

    __slots__ = ("facts", "job", "labels", "rank_labels", "ranks", "serving")

    def __init__(self, job: PlacedJob, host: str, gpus: Sequence[SimGpu]) -> None:
        self.job = job
        self.ranks = [gpus[i] for i in job.gpu_indices]
        self.labels = FrozenLabels({"host": host, **job.labels})
        self.rank_labels = [FrozenLabels({**self.labels, "gpu_uuid": g.uuid}) for g in self.ranks]
        app = job.spec.app
        self.serving = app is not None and app.latency_p50_s > 0
        facts = (
            {
                "app_batch_size": app.batch_size,
                "app_model_parameters": app.parameters,
                "app_model_layers": app.layers,
                "app_model_hidden_size": app.hidden_size,
                "app_sequence_length": app.sequence_length,
            }
            if app is not None
            else {}
        )
        self.facts: dict[str, float] = {k: float(v) for k, v in facts.items() if v}
