"""On a real NVIDIA GPU: gpulens.torch.inference times each call with two CUDA events (no
synchronisation added to the caller's stream), on eager and on torch.compile of the same
model, and `gpulens report` compares them; TensorRT is built when torch_tensorrt is installed,
else the request falls back to eager. Skipped cleanly (tests/conftest.py) without a GPU."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from tests.gpu.cuda_syncs import count_syncs  # noqa: E402

import gpulens.torch as gt  # noqa: E402

CALLS = 300


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return (
        torch.nn.Sequential(
            torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096),
            torch.nn.GELU(), torch.nn.Linear(4096, 1024),
        )
        .to("cuda:0", torch.float16)
        .eval()
    )  # fmt: skip


def _report(data_dir: Path, job: str) -> dict:
    from typer.testing import CliRunner

    from gpulens.present.cli import app

    args = ["report", "--data-dir", str(data_dir), "--job", job, "--format", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output[-3000:]
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_eager_and_compile_latency_on_the_gpu(tmp_path: Path) -> None:
    model = _model()
    x = torch.randn(64, 1024, device="cuda:0", dtype=torch.float16)
    walls = {}
    for engine in ("eager", "compile"):
        infer = gt.inference(model, job="svc-gpu", engine=engine, data_dir=tmp_path,
                             interval_s=1.0)  # fmt: skip
        with torch.no_grad():
            for _ in range(50):
                infer(x)
            assert count_syncs(lambda: [infer(x) for _ in range(20)]) == 0  # noqa: B023
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(CALLS - 70):
                infer(x)
            torch.cuda.synchronize()
            walls[engine] = (time.perf_counter() - t) / (CALLS - 70)
        infer.close()
        assert infer.engine == engine and infer.device.uuid
    doc = _report(tmp_path, "svc-gpu")
    by = {r["engine"]: r for r in doc["latency"]}
    assert set(by) == {"eager", "compile"}
    for engine, r in by.items():
        assert r["calls"] + r["warmup_calls"] == CALLS
        # GPU time between the call's two events: not above the synchronised wall per call
        assert 0 < r["p50_ms"] <= walls[engine] * 1e3 * 1.5, (r, walls)
        print(f"{engine}: p50 {r['p50_ms']:.4g} ms p95 {r['p95_ms']:.4g} ms p99 "
              f"{r['p99_ms']:.4g} ms, {r['qps']:.4g} requests/s, synchronised wall "
              f"{walls[engine] * 1e3:.4g} ms per call")  # fmt: skip
    (choice,) = doc["engine_choice"]
    print(choice["verdict"])


def test_tensorrt_is_built_or_falls_back(tmp_path: Path) -> None:
    model = _model()
    x = torch.randn(8, 1024, device="cuda:0", dtype=torch.float16)
    infer = gt.inference(model, job="trt-gpu", engine="tensorrt", data_dir=tmp_path)
    with torch.no_grad():
        y = infer(x)
        ref = model(x)
    infer.close()
    assert torch.allclose(y.float(), ref.float(), atol=5e-2, rtol=5e-2)
    if importlib.util.find_spec("torch_tensorrt") is None:
        assert infer.engine == "eager" and "torch_tensorrt" in (infer.fallback_reason or "")
    else:
        assert infer.engine in ("tensorrt", "eager"), infer.fallback_reason
    print("tensorrt:", infer.engine, infer.fallback_reason or "built")
