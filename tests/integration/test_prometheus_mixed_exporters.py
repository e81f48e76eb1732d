"""A fleet whose nodes run different GPU exporters, on real pages of the shared data.

- node A: dcgm-exporter (the Ericsson Tesla T4 page, under load: GPU_UTIL 91);
- node B: utkuozdemir's nvidia_gpu_exporter (`nvidia_smi_*`, the H100 page under load:
  utilization 100 %);
- node C runs both: dcgm-exporter (the Rafay Tesla T4 page, idle) and nvidia_gpu_exporter for
  the same GPU (the H100 page with its masked uuid set to the Rafay GPU's, as that exporter
  prints it: lower case, no ``GPU-`` prefix).

Every GPU is read, each from one exporter (dcgm-exporter first): three GPUs, not four, and
node C's duty cycle is dcgm-exporter's 0, not a mean with the other exporter's 100 %. First
on the pages parsed directly (the source's merge and the table builder), then through Debian's
Prometheus scraping the three nodes on loopback and `gpulens report --prometheus`.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.collect.prometheus.families import one_family_per_gpu
from gpulens.collect.prometheus.parse import Series
from gpulens.collect.prometheus.tables import build_tables
from gpulens.series_catalog import SERIES, SeriesMap

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from promdata import PROMETHEUS, Prometheus

TELEMETRY = "data/telemetry"
DCGM_A = f"{TELEMETRY}/cncf_k8s-ai-conformance/v1.35/ericsson-ccd/accelerator_metrics.prom"
DCGM_C = f"{TELEMETRY}/cncf_k8s-ai-conformance/v1.35/rafay/accelator_metrics.prom"
SMI = (
    f"{TELEMETRY}/utkuozdemir_nvidia_gpu_exporter/internal/integration/testdata/"
    "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.metrics"
)
MASKED = "00000000-0000-0000-0000-000000000000"
UUID_A = "GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a"
UUID_C = "GPU-d7cbb0cd-d4bd-c2f7-dfaf-221df5e958ea"
HOST_A, HOST_C = "cp-bm14r7", "ip-10-200-3-41"


def pages(shared: Path) -> dict[str, str]:
    """Node → its page(s): C serves the Rafay dcgm page and the H100 nvidia_smi page, whose
    uuid is the Rafay GPU's."""
    smi = (shared / SMI).read_text()
    same_gpu = smi.replace(MASKED, UUID_C.lower().removeprefix("gpu-"))
    return {
        "a": (shared / DCGM_A).read_text(),
        "b": smi,
        "c": (shared / DCGM_C).read_text() + same_gpu,
    }


def _series(text: str, extra: dict[str, str], ts_s: int) -> dict[str, list[Any]]:
    """A page as the per-metric step series a query of each known name returns."""
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            spec = SERIES.get(sample.name)
            if spec is None:
                continue
            s = Series(
                {**sample.labels, **extra},
                np.array([ts_s * 1000], dtype=np.int64),
                np.array([float(sample.value)]),
            )
            out.setdefault(spec.family, {}).setdefault(spec.metric, []).append((spec, s))
    return out


def test_pages_merged_one_exporter_per_gpu(shared: Path) -> None:
    by_family: dict[str, dict[str, list[Any]]] = {}
    for node, text in pages(shared).items():
        extra = {"instance": f"node-{node}:9400"}
        for family, series in _series(text, extra, 1_800_000_060).items():
            for metric, pairs in series.items():
                by_family.setdefault(family, {}).setdefault(metric, []).extend(pairs)
    assert set(by_family) == {"dcgm", "nvidia_smi_exporter"}
    order = [(f, by_family[f]) for f in ("dcgm", "nvidia_smi_exporter")]
    merged = one_family_per_gpu(order, SeriesMap())
    assert merged.gpus == {"dcgm": 2, "nvidia_smi_exporter": 1}
    assert merged.shared == 1
    rows = build_tables(merged.series, 60, SeriesMap()).gpu.to_pylist()
    by_uuid = {r["gpu_uuid"]: r for r in rows}
    assert set(by_uuid) == {UUID_A, UUID_C, MASKED}
    assert by_uuid[UUID_A]["gpu_util_ratio"] == pytest.approx(0.91)
    assert by_uuid[UUID_C]["gpu_util_ratio"] == 0.0  # dcgm-exporter's, not a mean with 1.0
    assert by_uuid[MASKED]["gpu_util_ratio"] == 1.0
    assert by_uuid[MASKED]["host"] == "node-b"
    # nvidia_gpu_exporter prints the memory size; dcgm's is used + free + reserved
    assert by_uuid[MASKED]["memory_total_bytes"] == 85_520_809_984
    assert by_uuid[MASKED]["power_watts"] == pytest.approx(631.95)


class _Pages:
    """Serves node → page at /<node>/metrics."""

    def __init__(self, served: dict[str, str]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                body = served[self.path.strip("/").split("/")[0]].encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def scraped(shared: Path, tmp_path: Path) -> Iterator[tuple[str, float, float]]:
    """Prometheus scraping the three nodes every second for 12 s: (URL, start, end)."""
    served = pages(shared)
    server = _Pages(served)
    try:
        config = {
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": f"node-{node}",
                    "metrics_path": f"/{node}/metrics",
                    "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}],
                    "relabel_configs": [
                        {"target_label": "instance", "replacement": f"node-{node}:9400"}
                    ],
                }
                for node in served
            ],
        }
        with Prometheus.with_config(tmp_path / "prom", config) as live:
            time.sleep(3)
            start = time.time()
            time.sleep(12)
            yield live.url, start, time.time()
    finally:
        server.close()


@pytest.mark.slow
@pytest.mark.skipif(
    not Path(PROMETHEUS).exists() and not os.environ.get("CI"),
    reason="needs Prometheus (Debian package `prometheus`; .ci/run installs it)",
)
def test_report_reads_every_node_once(scraped: tuple[str, float, float], tmp_path: Path) -> None:
    from gpulens.app import prometheus as prom_app
    from gpulens.config import load_config

    url, start, end = scraped
    cfg = load_config(None, env={}, overrides={"data_dir": str(tmp_path / "unused")})
    ns = 1_000_000_000
    view = prom_app.report(cfg, url, int(start * ns), int(end * ns), 0, step_s=1)
    gpus = {g["gpu_uuid"]: g for g in view.gpus}
    assert set(gpus) == {UUID_A, UUID_C, MASKED}
    assert (gpus[UUID_A]["host"], gpus[UUID_C]["host"]) == (HOST_A, HOST_C)
    assert gpus[MASKED]["host"] == "node-b"
    assert gpus[UUID_A]["mean_duty"] == pytest.approx(0.91)
    assert gpus[UUID_C]["mean_duty"] == 0.0
    assert gpus[MASKED]["mean_duty"] == pytest.approx(1.0)
    notes = " ".join(view.notes)
    assert "GPUs per exporter: dcgm-exporter 2, nvidia_gpu_exporter (nvidia_smi_*) 1" in notes
    assert "GPUs with series from more than one exporter: 1, each read once" in notes
    assert "nvidia_gpu_exporter (nvidia_smi_*) has no profiling series" in notes
