"""Named column maps for telemetry that other systems publish (``--preset NAME``).

A preset is a list of rules (a file-name pattern and the ColumnMap for files that match); the
first matching rule wins, and a file no rule matches is skipped (an input with nothing to
import is an error). Inside an archive the member's file name is matched.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from gpulens.collect.csv_import.mapping import ColumnMap, MetricColumn
from gpulens.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Preset:
    """A named set of (file-name pattern, ColumnMap) rules."""

    name: str
    description: str
    rules: tuple[tuple[str, ColumnMap], ...]

    def __call__(self, filename: str) -> ColumnMap | None:
        """The ColumnMap for `filename` (a base name), or None when no rule matches."""
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

PRESETS: dict[str, Preset] = {p.name: p for p in (ALIBABA_GENAI_2026,)}


def get_preset(name: str) -> Preset:
    """The preset called `name` (ConfigError listing the known ones otherwise)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(
            f"unknown preset {name!r}: use one of {', '.join(sorted(PRESETS))}"
        ) from None
