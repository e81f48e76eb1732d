"""Prometheus HTTP API JSON → series (pure: bytes or decoded objects in, arrays out, no I/O).

A `Series` is one label set with its sample times (int64 epoch seconds × 1000: milliseconds,
exact for the API's 3-decimal times) and values (float64). Values come as strings in the API
("0.93", "NaN", "+Inf"); NaN and ±Inf are dropped at parse time (missing, never 0). A matrix
(`query_range`), a vector (`query`) and a scalar are read; anything else is refused with one
`PrometheusFormatError` naming the source.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from gpulens.errors import CollectError


class PrometheusFormatError(CollectError):
    """An answer that is not the Prometheus HTTP API's JSON; names the source."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(
            f"{source}: {problem}. Expected the JSON the Prometheus HTTP API answers "
            '({"status": "success", "data": {"resultType": "matrix", "result": [...]}}): check '
            "that the URL is a Prometheus, Thanos, Mimir or VictoriaMetrics query endpoint"
        )


@dataclass(frozen=True, slots=True)
class Series:
    """One series: its labels (`__name__` included when the server sent it), sample times in
    epoch milliseconds and values, both in time order, NaN and ±Inf left out."""

    labels: Mapping[str, str]
    ts_ms: np.ndarray
    values: np.ndarray

    @property
    def name(self) -> str:
        return self.labels.get("__name__", "")


def decode(body: bytes, source: str) -> Any:
    """The `data` object of an API answer (raises PrometheusFormatError on anything else;
    an `error` answer is refused with its message)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise PrometheusFormatError(source, f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise PrometheusFormatError(source, "the answer is not a JSON object")
    if doc.get("status") != "success":
        raise PrometheusFormatError(
            source, f"status {doc.get('status')!r}: {doc.get('error') or 'no error text'}"
        )
    return doc.get("data")


def parse_result(data: Any, source: str) -> list[Series]:
    """The series of a `query_range` / `query` `data` object."""
    if not isinstance(data, dict) or "result" not in data:
        raise PrometheusFormatError(source, "no data.result in the answer")
    kind = data.get("resultType")
    result = data["result"]
    if kind == "scalar":
        return [_series({}, [result], source)]
    if kind not in ("matrix", "vector") or not isinstance(result, list):
        raise PrometheusFormatError(source, f"resultType {kind!r} is not matrix, vector or scalar")
    out: list[Series] = []
    for item in result:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise PrometheusFormatError(source, "a result item has no metric labels")
        labels = item["metric"]
        if kind == "matrix":
            points = item.get("values")
            if not isinstance(points, list):
                raise PrometheusFormatError(source, "a matrix series has no values list")
        else:
            value = item.get("value")
            points = [value] if value is not None else []
        series = _series(labels, points, source)
        if len(series.ts_ms):
            out.append(series)
    return out


def _series(labels: Mapping[str, Any], points: Iterable[Any], source: str) -> Series:
    pts = list(points)
    try:
        ts = np.fromiter((round(float(p[0]) * 1000) for p in pts), dtype=np.int64, count=len(pts))
        values = np.fromiter((float(p[1]) for p in pts), dtype=np.float64, count=len(pts))
    except (TypeError, ValueError, IndexError) as exc:
        raise PrometheusFormatError(source, f'a sample is not [time, "value"] ({exc})') from None
    keep = np.isfinite(values)
    if not keep.all():
        ts, values = ts[keep], values[keep]
    return Series({str(k): str(v) for k, v in labels.items()}, ts, values)


_METRIC = b'{"metric":'
_VALUES = b',"values":['


def parse_matrix(body: bytes, source: str) -> list[Series]:
    """The series of a raw `query_range` answer. Fast path for the layout Prometheus, Thanos,
    Mimir and VictoriaMetrics write (`{"metric":{...},"values":[[t,"v"],...]}` per series):
    labels are decoded per series, the sample pairs as one run of numbers by numpy, without a
    Python object per sample. (A quote inside a JSON string is escaped, so the raw byte
    patterns split only on structure.) Anything else goes through `decode` + `parse_result`."""
    head = body[:200]
    if not head.startswith(b'{"status":"success"') or b'"resultType":"matrix"' not in head:
        return parse_result(decode(body, source), source)
    out: list[Series] = []
    starts = _positions(body, _METRIC)
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(body)
        chunk = body[start + len(_METRIC) : end]
        cut = chunk.find(_VALUES)
        close = chunk.find(b"]]", cut)
        if cut < 0 or close < 0:
            return parse_result(decode(body, source), source)
        try:
            labels = orjson.loads(chunk[:cut])
        except orjson.JSONDecodeError:
            return parse_result(decode(body, source), source)
        numbers = np.fromstring(  # text mode: a C parse of "t,v,t,v"
            chunk[cut + len(_VALUES) : close].translate(None, b'[]"'), sep=","
        )
        if len(numbers) % 2 or not isinstance(labels, dict):
            return parse_result(decode(body, source), source)
        ts = np.round(numbers[0::2] * 1000).astype(np.int64)
        values = numbers[1::2]
        keep = np.isfinite(values)
        if not keep.all():
            ts, values = ts[keep], values[keep]
        if len(ts):
            out.append(Series({str(k): str(v) for k, v in labels.items()}, ts, values))
    return out


def _positions(body: bytes, pattern: bytes) -> list[int]:
    out = []
    at = body.find(pattern)
    while at >= 0:
        out.append(at)
        at = body.find(pattern, at + len(pattern))
    return out


def label_sets(data: Any, source: str) -> list[dict[str, str]]:
    """The label sets of a `series` answer."""
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise PrometheusFormatError(source, "the series answer is not a list of label sets")
    return [{str(k): str(v) for k, v in d.items()} for d in data]


def names(data: Any, source: str) -> list[str]:
    """The strings of a `labels` or label-values answer."""
    if not isinstance(data, list):
        raise PrometheusFormatError(source, "the answer is not a list of names")
    return [str(v) for v in data]
