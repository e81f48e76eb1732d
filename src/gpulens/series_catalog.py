"""The series sites have in Prometheus, mapped to gpulens metrics and labels, declared once.

`SERIES`: per series name, the catalog metric it carries, the conversion from the unit the
exporter prints to the metric's base unit, the family (which exporter writes it) and how it
is downsampled on the server at the analysis step (`avg_over_time` for activity and
rates, `max_over_time` for memory, levels and counters, `min_over_time` for free memory, so
that used + free in a step is the GPU's memory even while it changes). GPU families:

- ``dcgm``: NVIDIA dcgm-exporter, every field name of both DCGM spellings (pre-4.6 and 4.6,
  `collect.dcgm.fields`), and the 1.x lower-case names;
- ``gpulens``: gpulens agents' own `/metrics` (`gpulens_<metric>`, base units already);
- ``nvidia_gpu_exporter``: mindprince's nvidia_gpu_prometheus_exporter (`nvidia_gpu_*`);
- ``nvidia_smi_exporter``: utkuozdemir's nvidia_gpu_exporter (`nvidia_smi_*`, nvidia-smi's
  query fields in base units: ratios, bytes, watts, hertz; label `uuid`);
- ``slurm_job_exporter``: guilbaults' slurm-job-exporter (`slurm_job_*_gpu`): per-job GPU
  series, whose presence is the allocation.

`LABELS`: per gpulens label, the series labels that may carry it, first present wins (the
`exported_*` names first: when Prometheus relabels, the plain names belong to the exporter's
own pod). A site that relabels overrides any of them (`prometheus.labels` in the TOML, as
``gpulens_label=site_label``), see `SeriesMap.with_overrides`.

Cluster series (not per GPU): kube-state-metrics' `kube_pod_labels` / `kube_pod_owner` (who a
pod belongs to) and Kueue's `kueue_cluster_queue_*` (quota, usage and pending work per
ClusterQueue), in `KUEUE` and `KUBE_STATE`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

from gpulens import catalog, units
from gpulens.errors import ConfigError

Agg = Literal["avg", "max", "min"]
Family = Literal[
    "dcgm", "gpulens", "nvidia_gpu_exporter", "nvidia_smi_exporter", "slurm_job_exporter", "site"
]

#: the gpulens metrics a report uses, in the order they are looked for; one series per metric
#: and family is pulled (the first of its names the server has)
REPORT_METRICS: tuple[str, ...] = (
    "gpu_util_ratio",
    "sm_active_ratio",
    "tensor_active_ratio",
    "dram_active_ratio",
    "graphics_active_ratio",
    "fp32_active_ratio",
    "fp16_active_ratio",
    "memory_used_bytes",
    "memory_total_bytes",
    "memory_free_bytes",
    "memory_reserved_bytes",
    "power_watts",
    "energy_joules",
    "sm_clock_hertz",
    "sm_clock_max_hertz",
    "power_limit_watts",
    "temperature_celsius",
    "clocks_event_reasons",
    "mem_copy_util_ratio",
)
#: the profiling (useful work) metrics: without any, a report has duty cycle only
PROFILING_METRICS: frozenset[str] = frozenset(
    {"sm_active_ratio", "tensor_active_ratio", "dram_active_ratio", "graphics_active_ratio"}
)
#: metrics pulled as the smallest value of the step: free memory (max used + min free of one
#: step is the memory size exactly, as used + free is the same at every sample)
_MIN_METRICS: frozenset[str] = frozenset({"memory_free_bytes"})
#: metrics pulled as the largest value of the step: memory, levels, counters, bitmasks
_MAX_METRICS: frozenset[str] = frozenset(
    {
        "memory_used_bytes",
        "memory_total_bytes",
        "memory_reserved_bytes",
        "energy_joules",
        "sm_clock_max_hertz",
        "power_limit_watts",
        "clocks_event_reasons",
    }
)


def _same(value: float) -> float:
    return value


@dataclass(frozen=True, slots=True)
class SeriesSpec:
    """One series name: the metric it carries, the conversion to base units, its family and
    its step aggregation. `dcgm_id` is set for dcgm-exporter fields (their blank values are
    dropped like on a scraped page)."""

    name: str
    metric: str
    family: Family
    convert: Callable[[float], float] = _same
    agg: Agg = "avg"
    dcgm_id: int | None = None


def _agg(metric: str) -> Agg:
    return "max" if metric in _MAX_METRICS else "min" if metric in _MIN_METRICS else "avg"


def _dcgm_series() -> list[SeriesSpec]:
    from gpulens.collect.dcgm.fields import FIELD_IDS, LEGACY_NAMES, lookup

    out = []
    for name in (*FIELD_IDS, *LEGACY_NAMES):
        spec = lookup(name)
        if spec is not None and spec.metric in REPORT_METRICS:
            out.append(
                SeriesSpec(
                    name, spec.metric, "dcgm", spec.convert, _agg(spec.metric), spec.field_id
                )
            )
    return out


def _gpulens_series() -> list[SeriesSpec]:
    out = []
    for metric in REPORT_METRICS:
        m = catalog.METRICS[metric]
        name = "gpulens_" + metric
        if m.type == "counter" and not name.endswith("_total"):
            name += "_total"
        out.append(SeriesSpec(name, metric, "gpulens", agg=_agg(metric)))
    return out


_OTHER: tuple[SeriesSpec, ...] = (
    # nvidia_gpu_prometheus_exporter (NVML): labels minor_number, name, uuid
    SeriesSpec(
        "nvidia_gpu_duty_cycle", "gpu_util_ratio", "nvidia_gpu_exporter", units.percent_to_ratio
    ),
    SeriesSpec(
        "nvidia_gpu_memory_used_bytes", "memory_used_bytes", "nvidia_gpu_exporter", agg="max"
    ),
    SeriesSpec(
        "nvidia_gpu_memory_total_bytes", "memory_total_bytes", "nvidia_gpu_exporter", agg="max"
    ),
    SeriesSpec(
        "nvidia_gpu_power_usage_milliwatts",
        "power_watts",
        "nvidia_gpu_exporter",
        units.milliwatts_to_watts,
    ),
    SeriesSpec("nvidia_gpu_temperature_celsius", "temperature_celsius", "nvidia_gpu_exporter"),
    # utkuozdemir/nvidia_gpu_exporter (nvidia-smi --query-gpu, already in base units): uuid
    *(
        SeriesSpec(f"nvidia_smi_{name}", metric, "nvidia_smi_exporter", agg=_agg(metric))
        for name, metric in (
            ("utilization_gpu_ratio", "gpu_util_ratio"),
            ("utilization_memory_ratio", "mem_copy_util_ratio"),
            ("memory_used_bytes", "memory_used_bytes"),
            ("memory_free_bytes", "memory_free_bytes"),
            ("memory_total_bytes", "memory_total_bytes"),
            ("power_draw_watts", "power_watts"),
            ("power_limit_watts", "power_limit_watts"),
            ("temperature_gpu", "temperature_celsius"),
            ("clocks_current_sm_clock_hz", "sm_clock_hertz"),
            ("clocks_max_sm_clock_hz", "sm_clock_max_hertz"),
        )
    ),
    # slurm-job-exporter: labels user, account, slurmjobid, gpu, gpu_type (a job's GPUs only)
    SeriesSpec(
        "slurm_job_utilization_gpu", "gpu_util_ratio", "slurm_job_exporter", units.percent_to_ratio
    ),
    SeriesSpec(
        "slurm_job_utilization_gpu_memory",
        "mem_copy_util_ratio",
        "slurm_job_exporter",
        units.percent_to_ratio,
    ),
    SeriesSpec("slurm_job_memory_usage_gpu", "memory_used_bytes", "slurm_job_exporter", agg="max"),
    SeriesSpec(
        "slurm_job_power_gpu", "power_watts", "slurm_job_exporter", units.milliwatts_to_watts
    ),
)

#: every known GPU series name → its spec
SERIES: Mapping[str, SeriesSpec] = MappingProxyType(
    {s.name: s for s in (*_dcgm_series(), *_gpulens_series(), *_OTHER)}
)
#: families whose series exist only while a job holds the GPU (their presence is allocation)
JOB_FAMILIES: frozenset[str] = frozenset({"slurm_job_exporter"})

#: gpulens label → the series labels that may carry it, first present wins
LABELS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "host": ("Hostname", "hostname", "instance"),
        "gpu_uuid": ("UUID", "uuid"),
        "gpu_index": ("gpu", "minor_number"),
        "gpu_model": ("modelName", "model_name", "gpu_type", "name"),
        "mig_instance": ("GPU_I_ID",),
        "mig_profile": ("GPU_I_PROFILE",),
        "pod": ("exported_pod", "pod", "pod_name"),
        "namespace": ("exported_namespace", "namespace", "pod_namespace"),
        "container": ("exported_container", "container", "container_name"),
        "job_id": ("hpc_job", "job_id", "slurmjobid", "jobid"),
        "user": ("user",),
        "project": ("project", "account"),
        "team": ("team",),
        "engine": ("engine",),
        "queue": ("queue", "partition"),
    }
)
#: labels that say who holds a GPU (the allocation), among `LABELS`
HOLDER_KEYS: tuple[str, ...] = (
    "job_id",
    "pod",
    "namespace",
    "container",
    "user",
    "project",
    "team",
    "engine",
)
#: labels of the GPU itself, among `LABELS`
GPU_KEYS: tuple[str, ...] = (
    "host",
    "gpu_uuid",
    "gpu_index",
    "gpu_model",
    "mig_instance",
    "mig_profile",
)

# Kueue: per ClusterQueue (label `cluster_queue`), GPUs by `resource` (nvidia.com/gpu)
KUEUE_QUOTA = "kueue_cluster_queue_nominal_quota"
KUEUE_USAGE = "kueue_cluster_queue_resource_usage"
KUEUE_PENDING = "kueue_pending_workloads"
KUEUE: tuple[str, ...] = (KUEUE_QUOTA, KUEUE_USAGE, KUEUE_PENDING)
# kube-state-metrics: who a pod belongs to
KSM_LABELS = "kube_pod_labels"  # label_<pod label>="value"
KSM_OWNER = "kube_pod_owner"  # owner_kind, owner_name
KUBE_STATE: tuple[str, ...] = (KSM_LABELS, KSM_OWNER)
#: the GPU resource names Kueue quotas may use
GPU_RESOURCES: tuple[str, ...] = ("nvidia.com/gpu", "gpu")


@dataclass(frozen=True, slots=True)
class SeriesMap:
    """The mapping in force: series specs and label candidates, after a site's overrides.

    `team_label`: the Kubernetes pod label (as kube-state-metrics writes it, `label_<name>`)
    that names a pod's team."""

    series: Mapping[str, SeriesSpec] = field(default_factory=lambda: SERIES)
    labels: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: LABELS)
    team_label: str = "label_team"

    def with_overrides(
        self, labels: Sequence[str] = (), series: Sequence[str] = (), team_label: str | None = None
    ) -> SeriesMap:
        """This map with a site's renames: `labels` as ``gpulens_label=site_label[|other]``
        (the site's labels are tried first), `series` as ``site_series=metric[:unit]``
        (unit: percent, milliwatts, mib, mhz, or none for base units). A site's series is
        read instead of any exporter's for its metric (a recording rule replaces the raw
        series it summarises)."""
        new_labels = dict(self.labels)
        for item in labels:
            key, sep, value = item.partition("=")
            key = key.strip()
            names = tuple(n.strip() for n in value.split("|") if n.strip())
            if not sep or key not in LABELS or not names:
                raise ConfigError(
                    f"prometheus.labels {item!r}: expected GPULENS_LABEL=SITE_LABEL with a "
                    f"gpulens label among {', '.join(LABELS)}, e.g. host=node"
                )
            new_labels[key] = names + tuple(n for n in new_labels[key] if n not in names)
        new_series = dict(self.series)
        for item in series:
            name, sep, rest = item.partition("=")
            metric, _, unit = rest.partition(":")
            name, metric, unit = name.strip(), metric.strip(), unit.strip() or "none"
            if not sep or not name or metric not in REPORT_METRICS or unit not in _UNITS:
                raise ConfigError(
                    f"prometheus.series {item!r}: expected SERIES=METRIC[:UNIT] with a metric "
                    f"among {', '.join(REPORT_METRICS)} and a unit among {', '.join(_UNITS)}"
                )
            new_series[name] = SeriesSpec(name, metric, "site", _UNITS[unit], _agg(metric))
        return replace(
            self,
            labels=MappingProxyType(new_labels),
            series=MappingProxyType(new_series),
            team_label=team_label or self.team_label,
        )


_UNITS: Mapping[str, Callable[[float], float]] = MappingProxyType(
    {
        "none": _same,
        "percent": units.percent_to_ratio,
        "milliwatts": units.milliwatts_to_watts,
        "mib": units.mib_to_bytes,
        "mhz": units.mhz_to_hz,
    }
)
