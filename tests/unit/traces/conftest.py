"""The `write_trace` fixture: a tiny Kineto trace file written by the test."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def write_trace(tmp_path: Path) -> Callable[..., Path]:
    def write(events: list[dict[str, Any]], name: str = "trace.json", **meta: Any) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps({**meta, "traceEvents": events}), encoding="utf-8")
        return path

    return write
