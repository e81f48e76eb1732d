"""Named column maps for telemetry that other systems publish (``--preset NAME``).

A preset is a list of rules (a file-name pattern and the ColumnMap, or for published quantile
curves the CurveMap, for files that match); the first matching rule wins, and a file no rule
matches is skipped (an input with nothing to import is an error). Inside an archive the
member's file name is matched.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from gpulens.collect.csv_import.curves import CurveColumn, CurveMap
from gpulens.collect.csv_import.mapping import GIB, ColumnMap, MetricColumn
from gpulens.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Preset:
    """A named set of (file-name pattern, ColumnMap) rules."""

    name: str
    description: str
    rules: tuple[tuple[str, ColumnMap | CurveMap], ...]

    def __call__(self, filename: str) -> ColumnMap | CurveMap | None:
        """The map for `filename` (a base name), or None when no rule matches."""
        low = filename.lower()
        for pattern, mapping in self.rules:
            if fnmatch.fnmatch(low, pattern):
                return mapping
        return None


_ALIBABA_SOURCE = (("source", "alibaba-genai-2026"),)
# container_ip is the MD5 hash of the pod's IP: the only identity the trace has. Each pod has
# one GPU series, so the hash names the pod and (for per-GPU grouping) its GPU as well.
_ALIBABA_POD = (("container_ip", "pod"), ("container_ip", "gpu_uuid"))


def _alibaba(metric: MetricColumn, labels: tuple[tuple[str, str], ...]) -> ColumnMap:
    return ColumnMap(
        time_column="timestamp_anon",
        time_unit="s",
        labels=labels,
        metrics=(metric,),
        constants=_ALIBABA_SOURCE,
        fill_host=False,
    )


ALIBABA_GENAI_2026 = Preset(
    name="alibaba-genai-2026",
    description=(
        "Alibaba cluster-trace-v2026-GenAI (GenTD26): pod_gpu_duty_cycle_anon (percent → "
        "gpu_util_ratio), pod_gpu_memory_used_bytes_anon (memory_used_bytes), qps "
        "(app_samples_per_second, labelled request_type); the .tar.gz files as shipped or "
        "the CSVs inside. Timestamps are shifted epoch seconds; container_ip (an MD5 hash) "
        "becomes the pod label and the GPU id."
    ),
    rules=(
        (
            "pod_gpu_duty_cycle*.csv*",
            _alibaba(MetricColumn("value", "gpu_util_ratio", "percent"), _ALIBABA_POD),
        ),
        (
            "pod_gpu_memory_used_bytes*.csv*",
            _alibaba(MetricColumn("value", "memory_used_bytes"), _ALIBABA_POD),
        ),
        (
            "qps*.csv*",
            _alibaba(
                MetricColumn("value", "app_samples_per_second"),
                (("container_ip", "pod"), ("request_type", "request_type")),
            ),
        ),
    ),
)

_ACME = (("source", "acme-nsdi24"),)
# the label values come from the file name: util_gpu_kalos_full.csv → cluster "kalos",
# curves "util_gpu_kalos_full" (the two Kalos GPU files differ slightly; see the MANIFEST)
_ACME_NAMES = (("cluster", r"_(seren|kalos|philly|pai)(?:_|$)"), ("curves", r"^(.+)$"))
_PERCENT = 0.01


def _acme(*metrics: CurveColumn) -> CurveMap:
    return CurveMap(metrics=metrics, constants=_ACME, name_labels=_ACME_NAMES)


ACME_NSDI24 = Preset(
    name="acme-nsdi24",
    description=(
        "Shanghai AI Lab Acme trace (NSDI'24) util_cdf_csv quantile curves: util_gpu_* "
        "(gpu_util, sm_active, tc_activity in percent → gpu_util_ratio, sm_active_ratio, "
        "tensor_active_ratio; gpu_mem_fb_used_pct of 80 GiB → memory_used_bytes), gpu_power_* "
        "(power_watts), gpu_temp_* (temperature_celsius, memory_temperature_celsius). Each "
        "curve becomes 1000 representative samples (inverse CDF); columns are marginals and "
        "the rows no time series. Other files (CPU, node power, InfiniBand) are skipped."
    ),
    rules=(
        (
            "util_gpu_*.csv",
            _acme(
                CurveColumn("gpu_util", "gpu_util_ratio", _PERCENT),
                CurveColumn("sm_active", "sm_active_ratio", _PERCENT),
                CurveColumn("tc_activity", "tensor_active_ratio", _PERCENT),
                CurveColumn("gpu_mem_fb_used_pct", "memory_used_bytes", 80 * GIB * _PERCENT),
            ),
        ),
        ("gpu_power_*.csv", _acme(CurveColumn("gpu_power_w", "power_watts"))),
        (
            "gpu_temp_*.csv",
            _acme(
                CurveColumn("gpu_temp_c", "temperature_celsius"),
                CurveColumn("mem_temp_c", "memory_temperature_celsius"),
            ),
        ),
    ),
)

PRESETS: dict[str, Preset] = {p.name: p for p in (ALIBABA_GENAI_2026, ACME_NSDI24)}


def get_preset(name: str) -> Preset:
    """The preset called `name` (ConfigError listing the known ones otherwise)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(
            f"unknown preset {name!r}: use one of {', '.join(sorted(PRESETS))}"
        ) from None
