"""The per-rank analyses of a job on a Dask distributed cluster (`--executor dask://HOST:PORT`).

Each rank is one Dask task running `trace_rank.analyse_rank` on a worker. The worker opens the
rank file itself, so the files must be where the workers can read them: a file system they
share with this machine (the same path), or an fsspec URL (`s3://…`, `gs://…`) with the
filesystem's library installed on the workers. Only the rank's summary comes back. The
workers need gpulens installed (the same version as here).

Failures:

* a rank that cannot be read or parsed comes back as a failed rank (`RankFailure`) and the
  job goes on;
* a worker lost while it runs a rank (killed, out of memory, its machine gone) has that rank
  rescheduled by Dask on another worker; a rank whose task was on
  `distributed.scheduler.allowed-failures` + 1 workers that died (Dask's default: 4) is
  reported failed (`KilledWorker`: the rank probably kills workers, e.g. by exhausting their
  memory);
* any other exception in a task is retried `retries` times (Dask's task retries), then raised.

`distributed` is imported only here, when a Dask executor runs; without it, one ConfigError
says how to install it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpulens.app.trace_rank import (
    RankFailure,
    RankOutcome,
    RankTask,
    analyse_rank,
    settled,
)
from gpulens.errors import ConfigError, SourceUnavailable

__all__ = ["DaskExecutor"]

CONNECT_TIMEOUT_S = 20.0
RETRIES = 2


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise ConfigError(
            "--executor dask:// needs Dask's distributed scheduler client, which is not "
            "installed: pip install 'gpulens[dask]' (on this machine and on the workers)"
        ) from exc
    return distributed


@dataclass(frozen=True)
class DaskExecutor:
    """The Dask scheduler at `address` (`tcp://HOST:PORT`)."""

    address: str
    retries: int = RETRIES
    timeout_s: float = CONNECT_TIMEOUT_S

    @classmethod
    def from_url(cls, url: str) -> DaskExecutor:
        """`dask://HOST:PORT` → the executor for `tcp://HOST:PORT`; ConfigError otherwise."""
        host, sep, port = url.removeprefix("dask://").rstrip("/").rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"--executor {url!r}: expected dask://HOST:PORT, the address of a Dask "
                "scheduler (`dask scheduler` prints it; its default port is 8786)"
            )
        return cls(f"tcp://{host}:{port}")

    @property
    def name(self) -> str:
        return "dask://" + self.address.removeprefix("tcp://")

    def _connect(self, distributed: Any) -> Any:
        try:
            client = distributed.Client(self.address, timeout=self.timeout_s, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise SourceUnavailable(
                f"cannot reach the Dask scheduler at {self.name} ({exc}); start one "
                "(`dask scheduler`, then `dask worker tcp://HOST:8786` on each machine) "
                "or correct --executor"
            ) from None
        try:
            client.wait_for_workers(1, timeout=self.timeout_s)
        except (OSError, TimeoutError):
            client.close()
            raise SourceUnavailable(
                f"the Dask scheduler at {self.name} has no workers after "
                f"{self.timeout_s:g} s; start some (`dask worker {self.address}`)"
            ) from None
        return client

    def run(self, tasks: Sequence[RankTask]) -> list[RankOutcome]:
        distributed = _distributed()
        if not tasks:
            return []
        client = self._connect(distributed)
        try:
            job = uuid.uuid4().hex[:12]
            keys = [f"gpulens-rank-{job}-{t.position}" for t in tasks]
            futures = client.map(
                analyse_rank, list(tasks), key=keys, retries=self.retries, pure=False
            )
            out: list[RankOutcome] = []
            for task, future in zip(tasks, futures, strict=True):
                try:
                    out.append(settled(future.result()))
                except distributed.KilledWorker as exc:
                    failure = RankFailure(
                        task.position,
                        task.name,
                        "KilledWorker",
                        f"{task.name}: every Dask worker that analysed this rank died "
                        f"({exc}); it may need more memory than a worker has",
                    )
                    out.append(RankOutcome(task.position, failure=failure))
                future.release()
            return out
        finally:
            client.close()
