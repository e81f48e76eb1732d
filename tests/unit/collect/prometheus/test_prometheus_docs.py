"""docs/collectors/prometheus.md names every label and non-DCGM series the mapping reads."""

from __future__ import annotations

from pathlib import Path

from gpulens.series_catalog import KUBE_STATE, KUEUE, LABELS, SERIES

DOC = Path(__file__).resolve().parents[4] / "docs" / "collectors" / "prometheus.md"


def test_every_label_and_series_family_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [f"label {name}" for names in LABELS.values() for name in names
               if f"`{name}`" not in text]  # fmt: skip
    missing += [f"label key {key}" for key in LABELS if f"`{key}`" not in text]
    missing += [
        f"series {s.name}"
        for s in SERIES.values()
        if s.family in ("nvidia_gpu_exporter", "nvidia_smi_exporter", "slurm_job_exporter")
        and f"`{s.name}`" not in text
    ]
    missing += [f"series {name}" for name in (*KUEUE, *KUBE_STATE) if f"`{name}`" not in text]
    assert not missing, f"undocumented in {DOC.name}: {missing}"
