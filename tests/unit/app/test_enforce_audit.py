"""The enforce audit log: appended one whole line at a time, read back in order, a torn line
skipped and counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens.app.enforce_audit import AuditLog, audit_path
from gpulens.config import load_config
from gpulens.errors import ConfigError, StoreError


def test_append_and_read_back(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "sub" / "audit.jsonl")
    assert log.read() == []
    log.append({"key": "job:1", "ts_ns": 1, "level": "warn", "reason": "idle ☕"})
    log.append({"key": "job:1", "ts_ns": 2, "level": "act"})
    with (tmp_path / "sub" / "audit.jsonl").open("ab") as f:
        f.write(b'{"key": "job:2", "ts_ns": 3, "lev')  # a crash mid-line
    assert [r["ts_ns"] for r in log.read()] == [1, 2] and log.skipped == 1
    assert log.read()[0]["reason"] == "idle ☕"


def test_default_path_and_object_storage(tmp_path: Path) -> None:
    cfg = load_config(None, env={}, overrides={"data_dir": str(tmp_path)})
    assert audit_path(cfg) == tmp_path / "enforce-audit.jsonl"
    own = {"data_dir": str(tmp_path), "enforce.audit_log": str(tmp_path / "a.log")}
    cfg = load_config(None, env={}, overrides=own)
    assert audit_path(cfg) == tmp_path / "a.log"
    cfg = load_config(None, env={}, overrides={"data_dir": "s3://bucket/gpulens"})
    with pytest.raises(ConfigError, match=r"enforce\.audit_log"):
        audit_path(cfg)


def test_unwritable_place_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot be opened for appending"):
        AuditLog(blocker / "audit.jsonl").append({"key": "k"})
