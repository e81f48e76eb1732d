"""An engine fallback of a serving process on a GPU shows on that GPU's dashboard timeline and
on the Workloads page's engine timeline as "TensorRT unavailable" (the charts' labels and the
events tables), with the job it happened in."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from tests.unit.present.web.helpers import TestClient  # noqa: E402

import gpulens.torch as gt  # noqa: E402
from gpulens.app.agent import AgentContext  # noqa: E402
from gpulens.app.generate import generate  # noqa: E402
from gpulens.config import load_config  # noqa: E402
from gpulens.present.web.app import create_app  # noqa: E402
from gpulens.store import Store  # noqa: E402


def test_the_fallback_is_marked_on_the_gpu_timeline(tmp_path: Path) -> None:
    if importlib_find("torch_tensorrt"):
        pytest.skip("torch_tensorrt is installed here: TensorRT would not fall back")
    store = tmp_path / "runs"
    cfg = load_config(
        env={},
        overrides={
            "data_dir": str(store),
            "host": "gen",
            "simulated.hosts": 1,
            "simulated.gpus_per_host": 1,
            "simulated.scenarios": ["eager_inference"],
            "store.flush_seconds": 600.0,
        },
    )
    now = time.time_ns()
    generate(cfg, now - 900 * 10**9, now + 300 * 10**9, workers=1)  # the event falls inside
    with Store(store) as s:
        gpu = s.query(
            "SELECT gpu_uuid, any_value(host) AS host, any_value(job_id) AS job FROM process "
            "WHERE job_id IS NOT NULL AND gpu_uuid IS NOT NULL GROUP BY gpu_uuid "
            "ORDER BY gpu_uuid LIMIT 1"
        ).to_pylist()[0]
    # the serving process of that job on that GPU (its labels say where it runs)
    where = {"host": gpu["host"], "gpu_uuid": gpu["gpu_uuid"]}
    infer = gt.inference(
        torch.nn.Linear(4, 2), job=gpu["job"], engine="tensorrt", data_dir=store, labels=where
    )
    with torch.no_grad():
        infer(torch.randn(2, 4))
    infer.close()

    client = TestClient(create_app(AgentContext(live=None, data_dir=store)))
    figures = client.get(f"/charts/gpus/{gpu['gpu_uuid']}?range=1h").json()["figures"]
    marks = [t for f in figures.values() for t in f["data"] if t.get("name") == "events"]
    assert marks and "TensorRT unavailable" in marks[0]["text"], marks[0]["hovertext"]
    i = marks[0]["text"].index("TensorRT unavailable")
    assert marks[0]["hovertext"][i].startswith("engine_fallback: TensorRT unavailable: ")
    page = client.get(f"/gpus/{gpu['gpu_uuid']}?range=1h", headers={"accept": "text/html"})
    assert "<td>TensorRT unavailable</td>" in page.text
    # the jobs' engine timeline (Workloads) marks it too, naming the job and the host
    figures = client.get("/charts/workloads?range=1h").json()["figures"]
    (fallback,) = [t for t in figures["stack"]["data"] if t.get("name") == "engine fallbacks"]
    assert fallback["text"] == ["TensorRT unavailable"]
    assert fallback["hovertext"][0].startswith(f"job {gpu['job']} on {gpu['host']}: ")
    page = client.get("/workloads?range=1h", headers={"accept": "text/html"})
    row = page.text.split("<h2>Engine fallbacks</h2>", 1)[1].split("</table>", 1)[0]
    assert f"<td>{gpu['job']}</td>" in row and "<td>TensorRT unavailable</td>" in row


def importlib_find(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
