"""The Collector protocol every source implements, the health a multi-endpoint source
reports per endpoint, and the failed calls a source that makes many per tick (NVML) counts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpulens.model import Reading


@runtime_checkable
class Collector(Protocol):
    """A source of readings. Never writes storage, prints or exits.

    `collect(now_ns)` returns the readings observed at `now_ns`; it may raise CollectError (or
    any exception: the scheduler isolates it). `close()` releases what the collector holds.
    """

    name: str

    def collect(self, now_ns: int) -> Iterable[Reading]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class EndpointHealth:
    """One endpoint of a collector that reads several (a dcgm-exporter URL): `up` is whether
    its last attempt succeeded (None before the first), `errors_total` its failed attempts,
    `last_success_ns` when the last good one was taken (UTC ns), `last_error` its message."""

    endpoint: str
    up: bool | None
    errors_total: int
    last_success_ns: int | None
    last_error: str | None


@runtime_checkable
class HasEndpoints(Protocol):
    """A collector that reports the health of each of its endpoints."""

    def endpoint_health(self) -> Sequence[EndpointHealth]: ...


@runtime_checkable
class HasCallErrors(Protocol):
    """A collector that makes many calls per tick and counts those that failed, by (call,
    error name), without failing the tick (NVML: one metric left out, the others read)."""

    def call_errors(self) -> Mapping[tuple[str, str], int]: ...
