"""OpenAPI-driven fuzzing: schemathesis generates valid and invalid requests for every
operation the schema describes; none may end in a server error (5xx)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from .helpers import TestClient

#: examples per operation and mode: bounded so the whole fuzz stays within seconds
MAX_EXAMPLES = 20
#: the agent answers loopback names only when no token is set
HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def api_schema(make_app: Callable[..., FastAPI]) -> schemathesis.BaseSchema:
    app = make_app(max_upload_bytes=64 * 1024)
    return schemathesis.openapi.from_asgi("/openapi.json", app, headers={"host": HOST})


def _operations(schema: schemathesis.BaseSchema) -> list[schemathesis.APIOperation]:
    return [result.ok() for result in schema.get_all_operations()]


def test_the_schema_lists_the_api(api_schema: schemathesis.BaseSchema) -> None:
    labels = {op.label for op in _operations(api_schema)}
    assert "GET /api/fleet" in labels and "POST /api/traces/upload" in labels


@pytest.mark.parametrize("mode", list(GenerationMode), ids=lambda m: m.value)
def test_no_server_error(api_schema: schemathesis.BaseSchema, mode: GenerationMode) -> None:
    fuzzed = 0
    for operation in _operations(api_schema):

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def call(case: schemathesis.Case) -> None:
            response = case.call(base_url=f"http://{HOST}")
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path} query={case.query} → "
                f"{response.status_code}: {response.text[:300]}"
            )

        try:
            call()
        except Unsatisfiable:
            # an operation without parameters or body has no invalid form
            assert mode is GenerationMode.NEGATIVE, operation.label
            continue
        fuzzed += 1
    assert fuzzed >= 6


PAGES = ["/", "/gpus", "/gpus/GPU-x", "/workloads", "/people", "/findings", "/traces",
         "/charts/fleet", "/charts/workloads", "/charts/people", "/charts/findings"]  # fmt: skip
PARAMS = ["range", "points", "start_ns", "end_ns", "by", "severity", "rule", "name", "dir",
          "upload", "token"]  # fmt: skip
VALUES = st.one_of(
    st.text(max_size=24),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["1h", "7d", "team", "info", "run1.json", "job", "../x", "0" * 32]),
)


@given(
    path=st.sampled_from(PAGES),
    params=st.dictionaries(st.sampled_from(PARAMS), VALUES, max_size=4),
)
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_pages_never_fail(client: TestClient, path: str, params: dict[str, str]) -> None:
    r = client.get(path, params=params, headers={"accept": "text/html"})
    assert r.status_code < 500, (path, params, r.text[-300:])
