"""The HTTP client (auth, retries, size refusals, byte limit) through httpx's transport seam,
and the chunk plan's arithmetic against Prometheus's limits."""

from __future__ import annotations

import base64
import itertools

import httpx
import pytest

from gpulens.collect.prometheus.client import Auth, PrometheusClient, TooLarge, Transfer
from gpulens.collect.prometheus.plan import (
    PROMETHEUS_MAX_POINTS,
    QueryLimits,
    aligned,
    chunks,
    halve,
    step_query,
)
from gpulens.errors import CollectError, InputTooLarge, SourceUnavailable

OK = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'


def _client(handler: object, **kw: object) -> PrometheusClient:
    transport = httpx.MockTransport(handler)  # type: ignore[arg-type]
    return PrometheusClient(
        "https://user:secret@prom.example:9090/api/v1", transport=transport,
        sleep=lambda s: None, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_bearer_token_and_base_url() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=OK)

    c = _client(handler, auth=Auth(bearer_token="tok"))
    c.query_range("up", 60, 120, 60)
    (req,) = seen
    assert req.url.path == "/api/v1/query_range"
    assert req.url.params["step"] == "60" and req.url.params["query"] == "up"
    assert req.headers["authorization"] == "Bearer tok"
    assert c.name == "https://prom.example:9090"  # no password in messages


def test_basic_auth() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        return httpx.Response(200, content=b'{"status":"success","data":[]}')

    PrometheusClient(
        "http://p:9090", Auth(username="ann", password="pw"),
        transport=httpx.MockTransport(handler),
    ).labels(0, 60)  # fmt: skip
    assert seen == ["Basic " + base64.b64encode(b"ann:pw").decode()]


def test_retries_then_succeeds_and_gives_up_with_one_error() -> None:
    calls = {"n": 0}

    def flaky(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        return httpx.Response(503 if calls["n"] < 3 else 200, content=OK)

    assert _client(flaky, transfer=Transfer(retries=3)).query_range("up", 0, 60, 60) == {
        "resultType": "matrix",
        "result": [],
    }
    assert calls["n"] == 3

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    with pytest.raises(SourceUnavailable) as info:
        _client(down, transfer=Transfer(retries=2)).query_range("up", 0, 60, 60)
    assert "after 3 attempt(s)" in str(info.value)
    assert "secret" not in str(info.value)


def test_size_refusals_and_errors() -> None:
    def too_many(request: httpx.Request) -> httpx.Response:
        body = (b'{"status":"error","errorType":"bad_data","error":"exceeded maximum '
                b'resolution of 11,000 points per timeseries. Try decreasing the query '
                b'resolution (?step=XX)"}')  # fmt: skip
        return httpx.Response(400, content=body)

    with pytest.raises(TooLarge):
        _client(too_many).query_range("up", 0, 60, 60)

    def bad(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            400, content=b'{"status":"error","errorType":"bad_data","error":"parse error"}'
        )

    with pytest.raises(CollectError, match="bad_data: parse error"):
        _client(bad).query_range("up(", 0, 60, 60)

    def html(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"<html>login</html>")

    with pytest.raises(CollectError, match="not the Prometheus API"):
        _client(html).query_range("up", 0, 60, 60)


def test_byte_limit() -> None:
    def big(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"x" * 10_000)

    with pytest.raises(InputTooLarge, match=r"prometheus\.max_response_bytes"):
        _client(big, transfer=Transfer(max_bytes=1000)).query_range("up", 0, 60, 60)


def test_chunks_stay_under_the_point_and_sample_limits() -> None:
    # 30 days at 60 s = 43,200 points: four chunks of at most 10,999
    parts = chunks(0, 30 * 86400, 60, 10, 60)
    assert sum(p.points for p in parts) == 30 * 86400 // 60
    assert max(p.points for p in parts) < PROMETHEUS_MAX_POINTS
    assert parts[0].first_s == 60 and parts[-1].last_s == 30 * 86400
    for a, b in itertools.pairwise(parts):
        assert b.first_s == a.last_s + 60
    # 10,000 series: the samples budget (half of max_samples) bounds each chunk
    many = chunks(0, 7 * 86400, 900, 10_000, 60, QueryLimits(max_samples=1_000_000))
    assert all(p.points * 10_000 <= 500_000 for p in many)
    assert sum(p.points for p in many) == 7 * 86400 // 900


def test_alignment_halving_and_queries() -> None:
    assert aligned(1000, 4000, 900) == (900, 3600)
    with pytest.raises(ValueError, match="no whole step"):
        aligned(1000, 1100, 900)
    (c,) = chunks(0, 3600, 900, 1, 60)
    left, right = halve(c)
    assert (left.points, right.points) == (2, 2)
    assert right.first_s == left.last_s + 900
    assert step_query("DCGM_FI_DEV_GPU_UTIL", "avg", 900, 'cluster="a"') == (
        'avg_over_time(DCGM_FI_DEV_GPU_UTIL{cluster="a"}[900s])'
    )


def test_a_sites_recorded_series_replaces_the_raw_one_for_its_metric() -> None:
    from gpulens.collect.prometheus import PrometheusSource, SeriesMap

    mapping = SeriesMap().with_overrides(series=["gpu:util:avg1h=gpu_util_ratio:percent"])
    with PrometheusSource("http://p:9090", mapping) as src:
        family, chosen = src.choose(
            {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "gpu:util:avg1h", "up"}
        )
        assert family == "dcgm"
        assert [s.name for s in chosen["gpu_util_ratio"]] == ["gpu:util:avg1h"]
        assert [s.name for s in chosen["sm_active_ratio"]] == ["DCGM_FI_PROF_SM_ACTIVE"]
        assert src.choose({"gpu:util:avg1h"})[0] == "site"
        assert src.choose({"up"}) == (None, {})
