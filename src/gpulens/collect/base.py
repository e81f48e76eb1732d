"""The Collector protocol every source implements, and the registry of collector names."""

from __future__ import annotations

from collections.abc import Iterable
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
