"""A real model served through gpulens.torch.inference on CPU torch: eager against
torch.compile of the same model, shown as an engine comparison by `gpulens report`; TensorRT
asked for where it is absent (the fallback event, and the request still served); ONNX Runtime
built for real; a build error of the engine's own; GPULENS_DISABLE."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from tests.integration.integrations_check import report  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import gpulens.torch as gt  # noqa: E402
from gpulens.present.cli import app  # noqa: E402
from gpulens.store import Store  # noqa: E402

CALLS = 120


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    ).eval()  # fmt: skip


def _rows(store: Path, sql: str) -> list[dict[str, Any]]:
    s = Store(store)
    try:
        rows: list[dict[str, Any]] = s.query(sql).to_pylist()
        return rows
    finally:
        s.close()


def _serve(infer: Any, x: Any, calls: int) -> tuple[Any, float]:
    """The last output and the first call's seconds."""
    with torch.no_grad():
        t = time.perf_counter()
        y = infer(x)
        first = time.perf_counter() - t
        for _ in range(calls - 1):
            y = infer(x)
    return y, first


@pytest.mark.slow
def test_eager_and_compile_of_one_model_compared(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    model = _mlp()
    x = torch.randn(8, 64)
    eager = gt.inference(model, job="svc", engine="eager", data_dir=store, interval_s=0.5)
    compiled = gt.inference(model, job="svc", engine="compile", data_dir=store, interval_s=0.5)
    y_eager, _ = _serve(eager, x, CALLS)
    y_compiled, first_compiled = _serve(compiled, x, CALLS)
    eager.close()
    compiled.close()
    assert torch.allclose(y_eager, y_compiled, atol=1e-5)
    assert (eager.engine, compiled.engine) == ("eager", "compile")
    assert compiled.fallback_reason is None

    readings = _rows(
        store,
        "SELECT engine, source, job_id, run_id, pid, model, app_requests, app_warmup_requests "
        "FROM app WHERE app_requests IS NOT NULL OR app_warmup_requests IS NOT NULL",
    )
    assert {r["engine"] for r in readings} == {"eager", "compile"}
    assert {r["source"] for r in readings} == {"gpulens.torch.inference"}
    assert {r["job_id"] for r in readings} == {"svc"} and {r["model"] for r in readings} == {
        "Sequential"
    }
    for engine in ("eager", "compile"):  # every call counted once, steady or warm-up
        mine = [r for r in readings if r["engine"] == engine]
        assert (
            sum((r["app_requests"] or 0) + (r["app_warmup_requests"] or 0) for r in mine) == CALLS
        )

    doc = report(store, "svc")
    by = {r["engine"]: r for r in doc["latency"]}
    assert set(by) == {"eager", "compile"}
    for r in by.values():
        assert r["calls"] + r["warmup_calls"] == CALLS
        assert 0 < r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"] and r["qps"] > 0
        assert r["batch_size"] == 8
    # the compiling first call is warm-up: it is in no percentile
    assert by["compile"]["warmup_calls"] >= 1
    assert by["compile"]["p99_ms"] < first_compiled * 1e3 / 5
    (choice,) = doc["engine_choice"]
    assert choice["native_engine"] == "eager" and choice["optimised_engine"] == "compile"
    assert set(choice["curves"]) == {"eager", "compile"}
    warmups = _rows(store, "SELECT engine, message FROM event WHERE event = 'warmup_end'")
    assert {w["engine"] for w in warmups} == {"eager", "compile"}

    text = CliRunner().invoke(app, ["report", "--data-dir", str(store), "--job", "svc"])
    assert text.exit_code == 0, text.output[-2000:]
    section = text.stdout.split("Serving: latency per engine")[1]
    assert " eager " in section and " compile " in section and "requests/s" in section


def test_tensorrt_absent_falls_back_to_eager_and_serves(tmp_path: Path) -> None:
    if importlib.util.find_spec("torch_tensorrt") is not None:
        pytest.skip("torch_tensorrt is installed here: TensorRT would not be absent")
    store = tmp_path / "runs"
    model = _mlp()
    x = torch.randn(4, 64)
    infer = gt.inference(model, job="trt", engine="tensorrt", data_dir=store, interval_s=0.5)
    with torch.no_grad():
        y = infer(x)
        assert torch.equal(y, model(x))  # the first request is served, by eager
        for _ in range(30):
            infer(x)
    infer.close()
    assert infer.engine == "eager" and "torch_tensorrt" in (infer.fallback_reason or "")
    (fallback,) = _rows(store, "SELECT * FROM event WHERE event = 'engine_fallback'")
    assert fallback["engine"] == "tensorrt" and fallback["job_id"] == "trt"
    assert fallback["message"].startswith("TensorRT unavailable: torch_tensorrt is not installed")
    assert fallback["message"].endswith("serving on PyTorch eager")
    engines = _rows(store, "SELECT DISTINCT engine FROM app WHERE app_requests IS NOT NULL")
    assert engines == [{"engine": "eager"}]
    doc = report(store, "trt")
    assert [f["engine"] for f in doc["fallbacks"]] == ["tensorrt"]
    assert [r["engine"] for r in doc["latency"]] == ["eager"]


def test_onnxruntime_built_for_real_and_a_build_error_falls_back(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    store = tmp_path / "runs"
    model = _mlp()
    x = torch.randn(8, 64)
    ort = gt.inference(model, job="onnx", engine="onnxruntime", data_dir=store, interval_s=0.5)
    with torch.no_grad():
        y = ort(x)
        assert torch.allclose(y, model(x), atol=1e-5)
        x3 = torch.randn(3, 64)  # another batch size: the exported batch axis is dynamic
        assert torch.allclose(ort(x3), model(x3), atol=1e-5)
    ort.close()
    assert ort.engine == "onnxruntime" and ort.fallback_reason is None
    built = _rows(store, "SELECT engine, message FROM event WHERE event = 'engine_build'")
    assert (
        built[0]["engine"] == "onnxruntime"
        and "ONNX Runtime engine built in" in built[0]["message"]
    )

    # keyword inputs cannot be exported: the build fails, eager serves the request
    kw = gt.inference(_Keyword(), job="kw", engine="onnxruntime", data_dir=store, interval_s=0.5)
    with torch.no_grad():
        out = kw(inputs=x)
    kw.close()
    assert torch.equal(out, x * 2) and kw.engine == "eager"
    (fallback,) = _rows(
        store, "SELECT message FROM event WHERE event = 'engine_fallback' AND job_id = 'kw'"
    )
    assert fallback["message"].startswith("ONNX Runtime unavailable: ")
    assert "positional tensor inputs only" in fallback["message"]


class _Keyword(torch.nn.Module):
    def forward(self, inputs: Any) -> Any:
        return inputs * 2


def test_disabled_serves_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPULENS_DISABLE", "1")
    store = tmp_path / "runs"
    model = _mlp()
    x = torch.randn(2, 64)
    infer = gt.inference(model, job="off", engine="tensorrt", data_dir=store)
    with torch.no_grad():
        assert torch.equal(infer(x), model(x))
    infer.close()
    assert not store.exists()


_COMPILE_FAILS = """
import sys, torch, gpulens.torch as gt
m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
x = torch.randn(2, 8)
infer = gt.inference(m, job="cc", engine="compile", data_dir=sys.argv[1])
with torch.no_grad():
    assert torch.equal(infer(x), m(x))
infer.close()
print(infer.engine)
"""


@pytest.mark.slow
def test_a_compile_that_fails_at_the_first_call_falls_back(tmp_path: Path) -> None:
    """torch.compile builds lazily: with no working C++ compiler (CXX=/bin/false) inductor
    fails in the first call, which eager then serves."""
    import os
    import subprocess
    import sys

    script = tmp_path / "serve.py"
    script.write_text(_COMPILE_FAILS, encoding="utf-8")
    store = tmp_path / "runs"
    env = {**os.environ, "CXX": "/bin/false", "CC": "/bin/false"}
    done = subprocess.run([sys.executable, str(script), str(store)], env=env,
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "eager"
    (fallback,) = _rows(store, "SELECT engine, message FROM event WHERE event = 'engine_fallback'")
    assert fallback["engine"] == "compile"
    assert fallback["message"].startswith("torch.compile unavailable: its first call failed: ")
    assert "C++ compiler" in fallback["message"]
