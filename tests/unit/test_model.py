from __future__ import annotations

import pytest

from gpulens.model import LABEL_KEYS, Kind, Reading, event


def test_reading_requires_integer_nanoseconds() -> None:
    with pytest.raises(TypeError, match="integer nanoseconds"):
        Reading(Kind.GPU, 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Reading(Kind.GPU, True)


def test_reading_defaults_are_empty_and_shared_safely() -> None:
    a = Reading(Kind.HOST, 1)
    b = Reading(Kind.HOST, 2)
    assert dict(a.labels) == {} and dict(a.values) == {}
    assert a.label("host", "?") == "?"
    assert b.ts - a.ts == 1


def test_event_reading_carries_name_and_message() -> None:
    r = event(10, "driver_version", "driver 550.54 → 560.28", {"host": "n1"})
    assert r.kind is Kind.EVENT
    assert r.labels == {
        "host": "n1",
        "event": "driver_version",
        "message": "driver 550.54 → 560.28",
    }
    assert r.values == {}


def test_kinds_and_label_keys_are_stable_vocabulary() -> None:
    assert [k.value for k in Kind] == ["gpu", "process", "host", "app", "event"]
    assert len(set(LABEL_KEYS)) == len(LABEL_KEYS)
    for key in ("host", "gpu_uuid", "pid", "user", "job_id", "container", "pod", "engine"):
        assert key in LABEL_KEYS
