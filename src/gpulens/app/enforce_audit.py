"""The audit log of `gpulens enforce`: one JSON object per line, appended, never rewritten.

Each warning and each action is one line (`ts`, `ts_ns`, `level`, `key`, `subject`,
`idle_minutes`, `idle_since`, `command`, `ran`, `exit_code`, `reason`), written with one
`write` on a file opened for appending, under an exclusive lock, then flushed to disk: two
enforce runs at once never interleave their lines, and a crash loses at most the line being
written. Reading skips a line that is not a JSON object (a torn last line) and counts it: a
lost warning only means a holder is warned again before it is acted on.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulens.config import Config
from gpulens.errors import ConfigError, StoreError

AUDIT_FILE = "enforce-audit.jsonl"


def audit_path(cfg: Config) -> Path:
    """`enforce.audit_log`, else enforce-audit.jsonl in the (local) data directory."""
    configured = cfg.get("enforce.audit_log")
    if configured:
        return Path(configured).expanduser()
    data_dir = cfg.data_dir
    if not isinstance(data_dir, Path):
        raise ConfigError(
            f"data_dir {str(cfg.get('data_dir'))!r} is object storage, which cannot be appended "
            "to: set enforce.audit_log to a local file for the enforce audit log"
        )
    return data_dir / AUDIT_FILE


@dataclass
class AuditLog:
    """The log at `path` (created on the first record)."""

    path: Path
    skipped: int = 0  # lines of the last `read` that were not JSON objects

    def read(self) -> list[dict[str, Any]]:
        """Every record, in file order (a missing file: none)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(
                f"enforce audit log {str(self.path)!r} cannot be read ({exc.strerror}): fix its "
                "permissions or set enforce.audit_log"
            ) from None
        out: list[dict[str, Any]] = []
        self.skipped = 0
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if isinstance(record, dict):
                out.append(record)
            else:
                self.skipped += 1
        return out

    def append(self, record: Mapping[str, Any]) -> None:
        """Add one record, durably."""
        line = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        except OSError as exc:
            raise StoreError(
                f"enforce audit log {str(self.path)!r} cannot be opened for appending "
                f"({exc.strerror}): fix its directory or set enforce.audit_log"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            written = os.write(fd, line)
            if written != len(line):
                raise StoreError(
                    f"enforce audit log {str(self.path)!r}: only {written} of {len(line)} bytes "
                    "were written (disk full?)"
                )
            os.fsync(fd)
        except OSError as exc:
            raise StoreError(
                f"enforce audit log {str(self.path)!r} cannot be written ({exc.strerror})"
            ) from None
        finally:
            os.close(fd)
