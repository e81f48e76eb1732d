"""A small simulated store (one host, four GPUs, 20 minutes) and apps serving it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from gpulens.app.agent import AgentContext
from gpulens.app.generate import generate
from gpulens.config import load_config
from gpulens.present.web.app import create_app

from .helpers import SCENARIOS, TestClient, kineto

START = 1_764_374_400 * 1_000_000_000  # 2025-11-29 00:00 UTC
SPAN_S = 1200
NS = 1_000_000_000


@pytest.fixture(scope="session")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("webstore")
    cfg = load_config(
        env={},
        overrides={
            "data_dir": str(data_dir),
            "host": "gen",
            "simulated.hosts": 1,
            "simulated.gpus_per_host": 4,
            "simulated.scenarios": SCENARIOS,
            "store.flush_seconds": 600.0,
        },
    )
    generate(cfg, START, START + SPAN_S * NS, workers=1)
    return data_dir


@pytest.fixture(scope="session")
def trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("traces")
    (root / "run1.json").write_text(json.dumps(kineto()), encoding="utf-8")
    job = root / "job"
    job.mkdir()
    for rank in range(2):
        (job / f"rank{rank}.json").write_text(json.dumps(kineto(10 + rank)), encoding="utf-8")
    (root / "notes.txt").write_text("not a trace", encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def make_app(store_dir: Path, trace_dir: Path) -> Callable[..., FastAPI]:
    def make(**kw: Any) -> FastAPI:
        kw.setdefault("trace_dirs", (trace_dir,))
        kw.setdefault("data_dir", store_dir)
        ctx = AgentContext(live=None, **kw)
        return create_app(ctx)

    return make


@pytest.fixture(scope="session")
def client(make_app: Callable[..., FastAPI]) -> TestClient:
    return TestClient(make_app())
