"""Shared pieces of the web tests: the test client and a tiny profiler trace."""

from __future__ import annotations

import warnings
from typing import Any

with warnings.catch_warnings():  # starlette asks for httpx2, which is not a dependency here
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient as _StarletteClient


class TestClient(_StarletteClient):
    """Starlette's test client, addressing the app as a browser on this machine does
    (`Host: 127.0.0.1`: without a token the agent answers loopback names only)."""

    __test__ = False

    def __init__(self, app: Any, base_url: str = "http://127.0.0.1", **kw: Any) -> None:
        super().__init__(app, base_url=base_url, **kw)


__all__ = ["SCENARIOS", "TestClient", "kineto"]

#: the simulated jobs of the small store: a native and an optimised engine, and an idle job
SCENARIOS = ["eager_inference", "tensorrt_inference", "idle_allocated"]


def kineto(kernels: int = 20) -> dict[str, Any]:
    """A tiny PyTorch profiler trace: launches and kernels with gaps between them."""
    events: list[dict[str, Any]] = []
    for i in range(kernels):
        t = 100 * i
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": t,
                "dur": 5,
                "args": {"correlation": i + 1},
            }
        )
        events.append({"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0,
                       "tid": 7, "ts": t + 10, "dur": 40 + i % 5,
                       "args": {"stream": 7, "correlation": i + 1}})  # fmt: skip
    return {"traceEvents": events}
