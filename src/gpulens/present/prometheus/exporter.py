"""Prometheus `/metrics`: a client_python custom collector over the live view model.

Families are built fresh from `LiveState.snapshot()` on every scrape, so a GPU, process or job
that went away leaves no stale series. Names carry base units (`gpulens_power_watts`,
`gpulens_sm_active_ratio`); counters end in `_total`. GPU series carry dcgm-exporter's labels
(`gpu`, `UUID`, `device`, `modelName`, `Hostname`, `GPU_I_ID`, `GPU_I_PROFILE`) plus who
holds it, the attribution of its process (`gpulens.model.HOLDER_LABELS`: `user`, `project`,
`team`, `job_id`, `container`, `pod`, `namespace`, `engine`); process series carry
`ATTRIBUTION_LABELS` (the same and `process_name`). The job label is `job_id`, not `job`:
Prometheus sets `job` on every scraped series to the scrape job's name and would rename ours to
`exported_job`.

Derived series: `gpulens_gpu_state{state}` (0/1, one per state), `gpulens_useful_work_ratio`,
`gpulens_wasted_gpu_seconds_total{cause,kind="wasted"}` (actionable waste),
`gpulens_headroom_gpu_seconds_total{cause,kind="headroom"}` (the not-useful remainder in a
healthy state such as `compute_tensor`: not waste, never in the waste series),
`gpulens_gpu_hour_price`, `gpulens_findings_active`
and the agent's own health. With `dcgm_names=True` the raw GPU metrics are also written under
dcgm-exporter's names and units (`DCGM_FI_PROF_SM_ACTIVE`, `DCGM_FI_DEV_GPU_UTIL` in %, ...), so
NVIDIA's Grafana dashboard works unchanged. PIDs are labels only with `pid_labels=True`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import utils as prometheus_utils
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.registry import Collector, CollectorRegistry

from gpulens import catalog
from gpulens.analyze.prices import Prices
from gpulens.analyze.schema import STATES
from gpulens.app.live import GpuNow, LiveSnapshot, LiveState
from gpulens.collect.base import EndpointHealth
from gpulens.config import Config
from gpulens.model import ATTRIBUTION_LABELS, HOLDER_LABELS, Kind
from gpulens.numbers import is_nan
from gpulens.pipeline.selfstats import STORE_STAT_METRICS

if TYPE_CHECKING:
    from gpulens.app.agent import AgentContext

Family = type[GaugeMetricFamily] | type[CounterMetricFamily] | type[UnknownMetricFamily]
PREFIX = "gpulens_"
#: per kind of a live waste counter: its family name (without PREFIX) and help
_WASTE_FAMILIES: Mapping[str, tuple[str, str]] = {
    "wasted": (
        "wasted_gpu_seconds",
        "Allocated GPU-seconds that did no useful work in a state a finding acts on (actionable "
        "waste), by cause and the job holding the GPU (closed intervals)",
    ),
    "headroom": (
        "headroom_gpu_seconds",
        "Allocated GPU-seconds of healthy work (compute_tensor) that did no useful work: "
        "headroom for kernel-level tuning, not waste, by cause and the job holding the GPU "
        "(closed intervals)",
    ),
}
#: gpulens label → dcgm-exporter's label name
GPU_LABELS: tuple[tuple[str, str], ...] = (
    ("gpu_index", "gpu"),
    ("gpu_uuid", "UUID"),
    ("gpu_model", "modelName"),
    ("host", "Hostname"),
    ("mig_instance", "GPU_I_ID"),
    ("mig_profile", "GPU_I_PROFILE"),
)
#: labels of the price series: the physical GPU
PRICE_LABELS: frozenset[str] = frozenset({"gpu", "UUID", "modelName", "Hostname"})
#: DCGM field id → factor from the catalog's base unit to the unit dcgm-exporter prints
TO_DCGM_UNIT: Mapping[int, float] = {
    203: 100.0,  # GPU_UTIL %
    204: 100.0,
    206: 100.0,
    207: 100.0,
    191: 100.0,  # fan %
    250: 1 / 2**20,  # FB_* MiB
    251: 1 / 2**20,
    252: 1 / 2**20,
    253: 1 / 2**20,
    156: 1000.0,  # energy mJ
    100: 1e-6,  # clocks MHz
    101: 1e-6,
    113: 1e-6,
    114: 1e-6,
    240: 1e9,  # violation counters ns
    241: 1e9,
}


def gpu_labels(gpu: GpuNow) -> dict[str, str]:
    """dcgm-exporter-style identity labels of a GPU row, plus its attribution."""
    out = {ours: str(gpu.labels[key]) for key, ours in GPU_LABELS if gpu.labels.get(key)}
    if "gpu" in out:
        out["device"] = f"nvidia{out['gpu']}"
    out.update({k: v for k, v in gpu.attribution.items() if k in HOLDER_LABELS and v})
    return out


@dataclass(frozen=True, slots=True)
class ExporterOptions:
    """What the exporter writes besides gpulens' own names."""

    dcgm_names: bool = False
    pid_labels: bool = False


class _Families:
    """Families by name, each with a fixed label-name list (missing labels are '')."""

    TEXT_TYPES: Mapping[Family, str] = {
        GaugeMetricFamily: "gauge",
        CounterMetricFamily: "counter",
        UnknownMetricFamily: "untyped",
    }

    def __init__(self) -> None:
        self._rows: dict[str, list[tuple[Mapping[str, str], float]]] = defaultdict(list)
        self._meta: dict[str, tuple[Family, str]] = {}

    def add(
        self,
        name: str,
        help_text: str,
        labels: Mapping[str, str],
        value: float,
        family: Family = GaugeMetricFamily,
    ) -> None:
        if is_nan(value):  # NaN: absent, never exported as a number
            return
        self._meta.setdefault(name, (family, help_text))
        # kept by reference: callers pass a fresh mapping per entity and never change it, so
        # `text` renders each label set once however many metrics share it
        self._rows[name].append((labels, float(value)))

    def build(self) -> Iterator[Metric]:
        for name, rows in self._rows.items():
            family, help_text = self._meta[name]
            keys = sorted({k for labels, _ in rows for k in labels})
            metric = family(name, help_text, labels=keys)
            for labels, value in rows:
                metric.add_metric([labels.get(k, "") for k in keys], value)
            yield metric

    def text(self) -> bytes:
        """The text exposition (format 0.0.4) that `generate_latest` writes for `build()`'s
        families, less the empty labels (Prometheus reads `l=""` as no label). Each label set
        is rendered once per scrape instead of once per sample, and label names, which are
        fixed here, are not re-validated: a sixth of `generate_latest`'s CPU time for a node.
        """
        out: list[str] = []
        rendered: dict[int, str] = {}
        float_text: Callable[[float], str] = prometheus_utils.floatToGoString  # "1.5e+10", "+Inf"
        for name, rows in self._rows.items():
            family, help_text = self._meta[name]
            kind = self.TEXT_TYPES[family]
            if kind == "counter" and not name.endswith("_total"):
                name += "_total"
            help_line = help_text.replace("\\", "\\\\").replace("\n", "\\n")
            out.append(f"# HELP {name} {help_line}\n# TYPE {name} {kind}\n")
            for labels, value in rows:
                label_text = rendered.get(id(labels))
                if label_text is None:
                    label_text = rendered[id(labels)] = self._label_text(labels)
                out.append(f"{name}{label_text} {float_text(value)}\n")
        return "".join(out).encode("utf-8")

    @staticmethod
    def _label_text(labels: Mapping[str, str]) -> str:
        """`{a="x",b="y"}`: names sorted, values escaped, empty values left out."""
        parts = []
        for k, v in sorted(labels.items()):
            if v == "":
                continue
            if "\\" in v or "\n" in v or '"' in v:
                v = v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
            parts.append(f'{k}="{v}"')
        return "{" + ",".join(parts) + "}" if parts else ""


class LiveCollector(Collector):
    """The custom collector: `snapshot` is called once per scrape."""

    def __init__(
        self,
        snapshot: Callable[[], LiveSnapshot],
        prices: Prices | None = None,
        options: ExporterOptions | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.prices = prices or Prices()
        self.options = options or ExporterOptions()

    def describe(self) -> list[Metric]:
        return []  # families are dynamic; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        yield from self._families().build()

    def exposition(self) -> bytes:
        """One scrape as text exposition, without prometheus_client's per-sample encoding:
        the same series as `generate_latest` of the registry (see `_Families.text`)."""
        return self._families().text()

    def _families(self) -> _Families:
        snap = self.snapshot()
        fam = _Families()
        self._gpus(snap, fam)
        self._processes(snap, fam)
        self._hosts(snap, fam)
        self._waste(snap, fam)
        self._findings(snap, fam)
        self._health(snap, fam)
        return fam

    def _gpus(self, snap: LiveSnapshot, fam: _Families) -> None:
        priced: set[tuple[tuple[str, str], ...]] = set()
        for gpu in snap.gpus:
            labels = gpu_labels(gpu)
            for name, value in gpu.values.items():
                metric = catalog.METRICS.get(name)
                if metric is None or metric.kind is not Kind.GPU:
                    continue
                family = CounterMetricFamily if metric.type == "counter" else GaugeMetricFamily
                fam.add(PREFIX + name, metric.help, labels, value, family)
                if self.options.dcgm_names and metric.dcgm_name and metric.dcgm is not None:
                    scaled = value * TO_DCGM_UNIT.get(metric.dcgm, 1.0)
                    kind = UnknownMetricFamily if metric.type == "counter" else GaugeMetricFamily
                    fam.add(
                        metric.dcgm_name,
                        f"{metric.help} (DCGM name and unit)",
                        labels,
                        scaled,
                        kind,
                    )
            if gpu.state is not None:
                for state in STATES:
                    fam.add(
                        PREFIX + "gpu_state",
                        f"1 for the GPU's state over the last {snap.state_window_s:g} s "
                        "(one series per state), else 0",
                        {**labels, "state": state},
                        1.0 if gpu.state == state else 0.0,
                    )
            if gpu.useful_ratio is not None:
                fam.add(
                    PREFIX + "useful_work_ratio",
                    "Useful work: achieved tensor (or FP) throughput over the GPU's peak, "
                    f"over the last {snap.state_window_s:g} s",
                    labels,
                    gpu.useful_ratio,
                )
            price_labels = {k: v for k, v in labels.items() if k in PRICE_LABELS}
            price_key = tuple(sorted(price_labels.items()))
            if price_key not in priced:  # once per GPU, not once per MIG instance
                priced.add(price_key)
                fam.add(
                    PREFIX + "gpu_hour_price",
                    f"Price of one GPU-hour of this model ({self.prices.currency})",
                    price_labels,
                    self.prices.gpu_hour_price(gpu.labels.get("gpu_model")),
                )

    def _processes(self, snap: LiveSnapshot, fam: _Families) -> None:
        sums: dict[tuple[tuple[str, str], ...], dict[str, float]] = defaultdict(dict)
        # process series: the attribution (bounded: no pid unless asked); GPU and waste series carry
        # HOLDER_LABELS, the attribution less the process's own name
        keep = (*ATTRIBUTION_LABELS, "pid") if self.options.pid_labels else ATTRIBUTION_LABELS
        for proc in snap.processes:
            if not proc.labels.get("gpu_uuid"):
                continue  # a host-side process reading: not a GPU's process
            labels = {ours: str(proc.labels[k]) for k, ours in GPU_LABELS if proc.labels.get(k)}
            labels.update({k: str(proc.labels[k]) for k in keep if proc.labels.get(k)})
            key = tuple(sorted(labels.items()))
            acc = sums[key]
            acc["__count__"] = acc.get("__count__", 0.0) + 1
            for name, value in proc.values.items():
                metric = catalog.METRICS.get(name)
                if metric is not None and metric.type == "gauge":
                    acc[name] = acc.get(name, 0.0) + value
        for key, values in sums.items():
            labels = dict(key)
            fam.add(
                PREFIX + "gpu_processes",
                "Processes on the GPU with these labels",
                labels,
                values.pop("__count__"),
            )
            for name, value in values.items():
                fam.add(PREFIX + name, catalog.METRICS[name].help + " (summed)", labels, value)

    def _hosts(self, snap: LiveSnapshot, fam: _Families) -> None:
        for host in snap.hosts:
            if "collector" in host.labels or host.labels.get("source") == "gpulens":
                continue  # the agent's own readings: exported from its health below
            labels = {"Hostname": str(host.labels.get("host", ""))}
            for name, value in host.values.items():
                metric = catalog.METRICS.get(name)
                if metric is None or name.startswith(PREFIX):
                    continue
                family = CounterMetricFamily if metric.type == "counter" else GaugeMetricFamily
                fam.add(PREFIX + name, metric.help, labels, value, family)

    def _waste(self, snap: LiveSnapshot, fam: _Families) -> None:
        for counter in snap.waste:
            labels = {ours: counter.labels[k] for k, ours in GPU_LABELS if counter.labels.get(k)}
            labels.update({k: counter.labels[k] for k in HOLDER_LABELS if counter.labels.get(k)})
            name, text = _WASTE_FAMILIES[counter.kind]
            fam.add(
                PREFIX + name,
                text,
                {**labels, "cause": counter.cause, "kind": counter.kind},
                counter.seconds,
                CounterMetricFamily,
            )

    def _findings(self, snap: LiveSnapshot, fam: _Families) -> None:
        counts = Counter((f.rule_id, f.severity.value) for f in snap.findings)
        for (rule, severity), n in sorted(counts.items()):
            fam.add(
                PREFIX + "findings_active",
                "Findings of the agent's last analysis pass, by rule and severity",
                {"rule_id": rule, "severity": severity},
                float(n),
            )
        if snap.findings_ts is not None:
            fam.add(
                PREFIX + "findings_last_run_timestamp_seconds",
                "When the agent last ran the findings rules (Unix time)",
                {},
                snap.findings_ts / 1e9,
            )

    def _health(self, snap: LiveSnapshot, fam: _Families) -> None:
        for c in snap.collectors:
            labels = {"collector": c.name}
            fam.add(
                PREFIX + "collector_duration_seconds",
                "Wall time of the collector's last run",
                labels,
                c.last_duration_s,
            )
            fam.add(
                PREFIX + "collector_up",
                "1 when the collector's last run succeeded",
                labels,
                1.0 if c.last_status == "ok" else 0.0,
            )
            fam.add(
                PREFIX + "collector_errors",
                "Runs of the collector that raised",
                labels,
                float(c.errors_total),
                CounterMetricFamily,
            )
            fam.add(
                PREFIX + "collector_timeouts",
                "Runs of the collector that overran their timeout",
                labels,
                float(c.timeouts_total),
                CounterMetricFamily,
            )
            if c.last_success_ns is not None:
                fam.add(
                    PREFIX + "collector_last_success_timestamp_seconds",
                    catalog.METRICS[PREFIX + "collector_last_success_timestamp_seconds"].help,
                    labels,
                    c.last_success_ns / 1e9,
                )
            for ep in c.endpoints:
                self._endpoint(ep, {**labels, "endpoint": ep.endpoint}, fam)
            calls = PREFIX + "collector_call_errors_total"
            for call, error, n in c.call_errors:
                fam.add(
                    calls.removesuffix("_total"),
                    catalog.METRICS[calls].help,
                    {**labels, "call": call, "error": error},
                    float(n),
                    CounterMetricFamily,
                )
        if snap.ts is not None:
            fam.add(
                PREFIX + "last_tick_timestamp_seconds",
                "Time of the agent's last collection tick (Unix time)",
                {},
                snap.ts / 1e9,
            )
        if snap.store_lag_s is not None:
            fam.add(
                PREFIX + "store_lag_seconds",
                "Seconds since the agent last wrote its buffer to the store",
                {},
                snap.store_lag_s,
            )
        for key, value in snap.store.items():
            name = STORE_STAT_METRICS.get(key)
            metric = catalog.METRICS.get(name) if name else None
            if metric is None or name is None:
                continue
            family = CounterMetricFamily if metric.type == "counter" else GaugeMetricFamily
            fam.add(name, metric.help, {}, float(value), family)

    @staticmethod
    def _endpoint(ep: EndpointHealth, labels: Mapping[str, str], fam: _Families) -> None:
        """Up, failed scrapes and last success of one endpoint of a collector."""
        up = PREFIX + "collector_endpoint_up"
        fam.add(up, catalog.METRICS[up].help, labels, 1.0 if ep.up else 0.0)
        errors = PREFIX + "collector_endpoint_errors_total"
        fam.add(
            errors.removesuffix("_total"),
            catalog.METRICS[errors].help,
            labels,
            float(ep.errors_total),
            CounterMetricFamily,
        )
        if ep.last_success_ns is not None:
            last = PREFIX + "collector_endpoint_last_success_timestamp_seconds"
            fam.add(last, catalog.METRICS[last].help, labels, ep.last_success_ns / 1e9)


def registry(
    snapshot: Callable[[], LiveSnapshot],
    prices: Prices | None = None,
    options: ExporterOptions | None = None,
) -> CollectorRegistry:
    """A registry holding only the live collector (no default process or GC collectors)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(LiveCollector(snapshot, prices, options))
    return reg


def metrics_source(cfg: Config) -> Callable[[LiveState, AgentContext], Callable[[], bytes]]:
    """What the agent is handed to serve /metrics: the live collector's text over its live
    state, with the exporter options of `cfg` (`agent.dcgm_names`, `agent.pid_labels`)."""
    options = ExporterOptions(
        dcgm_names=bool(cfg.get("agent.dcgm_names")), pid_labels=bool(cfg.get("agent.pid_labels"))
    )

    def build(live: LiveState, ctx: AgentContext) -> Callable[[], bytes]:
        return LiveCollector(live.snapshot, ctx.prices, options).exposition

    return build
