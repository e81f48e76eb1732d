"""Shared test fixtures: the location of ../shared data and the GPU marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    """../shared beside the repository, or GPULENS_SHARED when set."""
    override = os.environ.get("GPULENS_SHARED")
    return Path(override) if override else REPO_ROOT.parent / "shared"


@pytest.fixture(scope="session")
def shared() -> Path:
    path = shared_dir()
    if not (path / "data").is_dir():
        pytest.fail(
            f"shared data not found at {path}: put the shared folder beside the repository "
            "or set GPULENS_SHARED"
        )
    return path


def _has_gpu() -> bool:
    try:
        import pynvml  # the nvidia-ml-py distribution

        pynvml.nvmlInit()
        try:
            return bool(pynvml.nvmlDeviceGetCount() > 0)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a working driver (NVML)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
