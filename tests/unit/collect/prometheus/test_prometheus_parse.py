"""The Prometheus source's pure parts on real captured input: API answers (a real query_range
matrix, real instant vectors from Prometheus and VictoriaMetrics) and real dcgm-exporter pages,
whose readings must match what the dcgm page parser makes of the same page."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.collect.dcgm.parse import parse_exposition
from gpulens.collect.prometheus.parse import (
    PrometheusFormatError,
    Series,
    decode,
    parse_matrix,
    parse_result,
)
from gpulens.collect.prometheus.tables import build_tables, identity
from gpulens.errors import ConfigError
from gpulens.model import Kind
from gpulens.series_catalog import REPORT_METRICS, SERIES, SeriesMap

SCHED = "data/scheduler"
PAGES = (
    "data/telemetry/cncf_k8s-ai-conformance/v1.35/ericsson-ccd/accelerator_metrics.prom",
    "data/telemetry/cncf_k8s-ai-conformance/v1.35/rafay/accelator_metrics.prom",
    "data/telemetry/cncf_k8s-ai-conformance/v1.35/vks/accelerator_metrics.prom",
    "data/telemetry/cncf_k8s-ai-conformance/v1.35/kops/tests/"
    "TestObservability_AcceleratorMetrics_ViaDCGM/output.prom",
)


def _fenced_json(md: Path) -> bytes:
    """The JSON object inside a Markdown evidence file (the first `{` after the curl line to
    its matching close)."""
    text = md.read_text()
    start = text.index("{", text.index("api/v1/query"))
    depth = 0
    for i, ch in enumerate(text[start:], start):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            return text[start : i + 1].encode()
    raise AssertionError(f"no JSON object in {md}")


def test_real_query_range_matrix(shared: Path) -> None:
    path = shared / SCHED / "rackslab_Slurm-web/tests/assets/prometheus/gpus-hour.json"
    raw = path.read_bytes()
    series = parse_result(decode(raw, str(path)), str(path))
    doc = json.loads(raw)["data"]["result"]
    assert len(series) == len(doc)
    for s, d in zip(series, doc, strict=True):
        assert dict(s.labels) == d["metric"]
        assert len(s.ts_ms) == len(d["values"])
        assert s.ts_ms[0] == int(d["values"][0][0]) * 1000
        assert np.diff(s.ts_ms).tolist() == [30_000] * (len(s.ts_ms) - 1)
        assert s.values.tolist() == [float(v) for _, v in d["values"]]


@pytest.mark.parametrize(
    "evidence",
    ["cncf_k8s-ai-conformance/v1.35/rafay/ai_service_metrics.md",
     "cncf_k8s-ai-conformance/v1.35/ericsson-ccd/ai_service_metrics.md"],
)  # fmt: skip
def test_real_instant_vectors_and_their_labels(shared: Path, evidence: str) -> None:
    body = _fenced_json(shared / SCHED / evidence)
    series = parse_result(decode(body, evidence), evidence)
    doc = json.loads(body)["data"]["result"]
    assert len(series) == len(doc) >= 1
    for s, d in zip(series, doc, strict=True):
        assert s.name == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
        assert s.values.tolist() == [float(d["value"][1])]
        ids = identity(s.labels, SeriesMap())
        assert ids["gpu_uuid"] == d["metric"]["UUID"]
        assert ids["gpu_index"] == d["metric"]["gpu"]
        assert ids["host"] == d["metric"].get("Hostname", d["metric"]["instance"].split(":")[0])
        assert ids["gpu_model"] == d["metric"]["modelName"]


def test_nan_and_inf_are_dropped_not_zero() -> None:
    body = (
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"gpu":"0"},'
        b'"values":[[60,"0.5"],[120,"NaN"],[180,"+Inf"],[240,"0"]]}]}}'
    )
    (s,) = parse_result(decode(body, "x"), "x")
    assert s.ts_ms.tolist() == [60_000, 240_000]
    assert s.values.tolist() == [0.5, 0.0]


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"<html>", "not JSON"),
        (b'{"status":"error","errorType":"bad_data","error":"parse error"}', "parse error"),
        (b'{"status":"success","data":{"resultType":"streams","result":[]}}', "resultType"),
        (
            b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},'
            b'"values":[["x"]]}]}}',
            "not [time",
        ),
    ],
)
def test_bad_answers_get_one_clear_error(body: bytes, problem: str) -> None:
    with pytest.raises(PrometheusFormatError, match=re.escape(problem)) as info:
        parse_result(decode(body, "http://prom:9090"), "http://prom:9090")
    assert "http://prom:9090" in str(info.value)


def _page_series(text: str, ts_s: int) -> dict[str, list[tuple[object, Series]]]:
    """A scraped page as the step series a query of each known name would return."""
    out: dict[str, list[tuple[object, Series]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # prometheus_client adds _total to a counter's samples; Prometheus stores the name
            # as the page prints it
            name = sample.name
            if family.type == "counter" and name not in SERIES:
                name = name.removesuffix("_total")
            spec = SERIES.get(name)
            if spec is None:
                continue
            s = Series(
                dict(sample.labels),
                np.array([ts_s * 1000], dtype=np.int64),
                np.array([float(sample.value)]),
            )
            out.setdefault(spec.metric, []).append((spec, s))
    return out


@pytest.mark.parametrize("page", PAGES)
def test_tables_match_the_dcgm_page_parser(shared: Path, page: str) -> None:
    """The same page read as Prometheus series and by the dcgm page parser gives the same
    GPUs and the same values in base units (two independent paths over one real input)."""
    text = (shared / page).read_text()
    step = 60
    tables = build_tables(_page_series(text, 1_800_000_060), step, SeriesMap())  # type: ignore[arg-type]
    gpu = tables.gpu.to_pylist()
    assert gpu, "no GPU rows"
    assert {r["ts"] for r in gpu} == {1_800_000_000 * 10**9}  # the step's start
    readings = [r for r in parse_exposition(text, page, 0).readings if r.kind is Kind.GPU]
    by_uuid = {r.labels["gpu_uuid"]: r for r in readings}
    assert {r["gpu_uuid"] for r in gpu} == set(by_uuid)
    compared = 0
    for row in gpu:
        ref = by_uuid[row["gpu_uuid"]]
        assert row["host"] == ref.labels.get("host")
        assert row["gpu_model"] == ref.labels.get("gpu_model")
        for metric in REPORT_METRICS:
            if metric in ref.values:
                assert row[metric] == pytest.approx(ref.values[metric], rel=1e-12), metric
                compared += 1
            elif metric == "memory_total_bytes" and {
                "memory_used_bytes",
                "memory_free_bytes",
            } <= set(ref.values):
                # no FB_TOTAL on the page: the memory size is used + free + reserved, as
                # DCGM computes FB_TOTAL (15,358 MiB for the Tesla T4 of the Ericsson page)
                want = sum(
                    ref.values.get(m, 0.0)
                    for m in ("memory_used_bytes", "memory_free_bytes", "memory_reserved_bytes")
                )
                assert row[metric] == pytest.approx(want, rel=1e-12)
            else:
                assert row.get(metric) is None, f"{metric} invented"
    assert compared >= 3


def test_memory_size_from_used_free_and_reserved(shared: Path) -> None:
    """The Ericsson page has FB_USED 5120, FB_FREE 9791 and FB_RESERVED 447 MiB and no
    FB_TOTAL: the GPU's memory is their sum, the Tesla T4's 15,358 MiB as DCGM counts it."""
    text = (shared / PAGES[0]).read_text()
    (row,) = build_tables(_page_series(text, 120), 60, SeriesMap()).gpu.to_pylist()  # type: ignore[arg-type]
    assert row["memory_total_bytes"] == (5120 + 9791 + 447) * 2**20
    assert row["memory_reserved_bytes"] == 447 * 2**20


def test_ericsson_page_under_load_keeps_the_gap_between_duty_and_useful_work(
    shared: Path,
) -> None:
    text = (shared / PAGES[0]).read_text()
    (row,) = build_tables(_page_series(text, 120), 60, SeriesMap()).gpu.to_pylist()  # type: ignore[arg-type]
    assert row["gpu_util_ratio"] == pytest.approx(0.91)
    assert row["graphics_active_ratio"] < 0.2
    assert row["tensor_active_ratio"] < 0.01


def test_holder_labels_become_process_rows_and_gaps_stay_gaps() -> None:
    spec = SERIES["DCGM_FI_DEV_GPU_UTIL"]
    mem = SERIES["DCGM_FI_DEV_FB_USED"]
    base = {"Hostname": "n1", "UUID": "GPU-a", "gpu": "0", "modelName": "NVIDIA H100"}
    held = {**base, "hpc_job": "42"}
    ts_free = np.array([60_000, 120_000], dtype=np.int64)
    ts_held = np.array([240_000, 300_000], dtype=np.int64)  # 180 s: no sample, a gap
    series = {
        "gpu_util_ratio": [
            (spec, Series(base, ts_free, np.array([0.0, 0.0]))),
            (spec, Series(held, ts_held, np.array([90.0, 80.0]))),
        ],
        "memory_used_bytes": [(mem, Series(held, ts_held, np.array([1024.0, 2048.0])))],
    }
    tables = build_tables(series, 60, SeriesMap())  # type: ignore[arg-type]
    gpu = tables.gpu.to_pylist()
    assert [r["ts"] // 10**9 for r in gpu] == [0, 60, 180, 240]
    assert [r["gpu_util_ratio"] for r in gpu] == [0.0, 0.0, 0.9, 0.8]
    assert [r["memory_used_bytes"] for r in gpu] == [None, None, 1024 * 2**20, 2048 * 2**20]
    proc = tables.process.to_pylist()
    assert [(r["ts"] // 10**9, r["job_id"]) for r in proc] == [(180, "42"), (240, "42")]
    assert [r["process_memory_used_bytes"] for r in proc] == [1024 * 2**20, 2048 * 2**20]


def test_dcgm_blank_values_are_dropped() -> None:
    spec = SERIES["DCGM_FI_DEV_POWER_USAGE"]
    s = Series({"UUID": "GPU-a", "gpu": "0"}, np.array([60_000, 120_000]),
               np.array([250.0, 1.4e14 + 1]))  # fmt: skip
    tables = build_tables({"power_watts": [(spec, s)]}, 60, SeriesMap())
    assert [r["power_watts"] for r in tables.gpu.to_pylist()] == [250.0]
    assert tables.skipped == {"sentinel": 1}


def test_mig_instances_are_their_own_gpus() -> None:
    spec = SERIES["DCGM_FI_PROF_SM_ACTIVE"]
    labels = {"UUID": "GPU-p", "gpu": "0", "GPU_I_ID": "2", "GPU_I_PROFILE": "3g.40gb",
              "Hostname": "n"}  # fmt: skip
    s = Series(labels, np.array([60_000]), np.array([0.5]))
    (row,) = build_tables({"sm_active_ratio": [(spec, s)]}, 60, SeriesMap()).gpu.to_pylist()
    assert row["gpu_uuid"] == "GPU-p/gi2"
    assert row["parent_uuid"] == "GPU-p"
    assert row["mig_profile"] == "3g.40gb"


def test_site_overrides_of_labels_and_series() -> None:
    mapping = SeriesMap().with_overrides(
        labels=["host=node", "job_id=slurm_job"], series=["site_gpu_busy=gpu_util_ratio:percent"]
    )
    ids = identity({"node": "gpu7", "instance": "x:1", "slurm_job": "9", "UUID": "u"}, mapping)
    assert ids["host"] == "gpu7" and ids["job_id"] == "9"
    assert mapping.series["site_gpu_busy"].convert(50.0) == 0.5
    with pytest.raises(ConfigError, match=r"prometheus\.labels"):
        SeriesMap().with_overrides(labels=["hostname"])
    with pytest.raises(ConfigError, match=r"prometheus\.series"):
        SeriesMap().with_overrides(series=["x=not_a_metric"])


def test_fast_matrix_path_equals_the_generic_one(shared: Path) -> None:
    """The real query_range answer, as the file has it (spaced: the generic path) and as
    Prometheus writes it (compact: the fast path), gives the same series."""
    path = shared / SCHED / "rackslab_Slurm-web/tests/assets/prometheus/jobs-hour.json"
    raw = path.read_bytes()
    compact = orjson.dumps(orjson.loads(raw))
    assert compact.startswith(b'{"status":"success","data":{"resultType":"matrix"')
    generic = parse_result(decode(raw, "x"), "x")
    for got in (parse_matrix(raw, "x"), parse_matrix(compact, "x")):
        assert len(got) == len(generic) == 8
        for a, b in zip(got, generic, strict=True):
            assert dict(a.labels) == dict(b.labels)
            assert a.ts_ms.tolist() == b.ts_ms.tolist()
            assert a.values.tolist() == b.values.tolist()


def test_fast_matrix_path_drops_nan_and_keeps_escaped_labels() -> None:
    body = (
        b'{"status":"success","data":{"resultType":"matrix","result":['
        b'{"metric":{"pod":"a\\"{\\"metric\\":b","gpu":"0"},"values":[[60,"1.5"],[120,"NaN"],'
        b'[180.5,"+Inf"],[240,"2"]]},{"metric":{"gpu":"1"},"values":[[60,"3"]]}]}}'
    )
    a, b = parse_matrix(body, "x")
    assert a.labels["pod"] == 'a"{"metric":b'
    assert a.ts_ms.tolist() == [60_000, 240_000] and a.values.tolist() == [1.5, 2.0]
    assert b.values.tolist() == [3.0]
    with pytest.raises(PrometheusFormatError):
        parse_matrix(b'{"status":"error","error":"boom"}', "x")
