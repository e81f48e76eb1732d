"""On a real NVIDIA GPU: gpulens.torch times phases with CUDA events without adding
synchronisations, labels its readings with the GPU NVML sees, and measures the MFU of a bf16
matmul loop against the catalog's peak (checked against the hand FLOP count over synchronised
wall time). Skipped cleanly (tests/conftest.py) where no GPU and driver are present."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from tests.gpu.cuda_syncs import count_syncs  # noqa: E402

import gpulens.torch as gt  # noqa: E402
from gpulens.store import Store  # noqa: E402


def _rows(data_dir: Path, job: str) -> list[dict]:
    with Store(data_dir) as store:
        table = store.query("SELECT * FROM app WHERE job_id = $j ORDER BY ts", {"j": job})
    return [{k: v for k, v in r.items() if v is not None} for r in table.to_pylist()]


def test_cuda_event_phases_add_no_synchronisation(tmp_path: Path) -> None:
    dev = torch.device("cuda:0")
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = [torch.randn(256, 1024, device=dev) for _ in range(50)]

    def train(run: gt.Run | None) -> None:
        for x in batches if run is None else run.wrap(batches):
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if run is not None:
                run.step(samples=x.shape[0])

    train(None)  # warm-up
    bare = count_syncs(lambda: train(None))
    with gt.track(job="events", data_dir=tmp_path, model=model, optimizer=opt,
                  interval_s=0.2) as run:  # fmt: skip
        assert isinstance(run, gt.Run) and run.device.cuda
        tracked = count_syncs(lambda: train(run))
        torch.cuda.synchronize()
        time.sleep(0.5)  # the writer thread reads the passed events
    assert tracked == bare
    rows = _rows(tmp_path, "events")
    assert sum(r["app_steps"] for r in rows) == 50
    phased = [r for r in rows if "app_forward_seconds" in r]
    assert phased, "no phase times read from the CUDA events"
    for r in phased:
        assert r["app_forward_seconds"] > 0 and r["app_backward_seconds"] > 0
        assert r["app_optimizer_seconds"] > 0
    assert rows[-1]["app_memory_max_allocated_bytes"] > 0
    assert rows[-1]["app_memory_reserved_bytes"] >= rows[-1]["app_memory_fragmentation_bytes"]
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    finally:
        pynvml.nvmlShutdown()
    visible = __import__("os").environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    if visible in ("", "0"):
        assert rows[0]["gpu_uuid"] == uuid  # the telemetry's GPU: the join with the agent


def test_bf16_matmul_mfu_against_the_catalog_peak(tmp_path: Path) -> None:
    n, per_step, steps = 8192, 10, 60
    dev = torch.device("cuda:0")
    layer = torch.nn.Linear(n, n, bias=False, device=dev, dtype=torch.bfloat16)
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    with torch.no_grad():
        layer(x)
        torch.cuda.synchronize()
        with gt.track(job="mfu", data_dir=tmp_path, model=layer, interval_s=0.5) as run:
            assert isinstance(run, gt.Run)
            assert run.peak_flops, f"no catalog peak for {run.device.model!r} bf16"
            start = time.perf_counter()
            for _ in range(steps):
                for _ in range(per_step):
                    layer(x)
                run.step(samples=n)
            torch.cuda.synchronize()
            wall = time.perf_counter() - start
    hand = 2 * n**3 * per_step
    assert run.step_flops == pytest.approx(hand, rel=0.01)
    measured = hand * steps / wall / run.peak_flops  # over synchronised wall time
    rows = _rows(tmp_path, "mfu")
    mfu = sum(r["app_mfu_ratio"] * r["app_steps"] * r["app_step_seconds"] for r in rows) / sum(
        r["app_steps"] * r["app_step_seconds"] for r in rows
    )
    print(
        f"\n{run.device.model}: bf16 matmul {n}², MFU {mfu:.3f} by the tracker, "
        f"{measured:.3f} by hand over synchronised time, peak {run.peak_flops / 1e12:.1f} "
        "TFLOP/s"
    )
    assert 0.05 < mfu <= 1.0
    assert mfu == pytest.approx(measured, rel=0.15)
