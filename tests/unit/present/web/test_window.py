"""The time window of a page: named ranges anchored at the newest reading, steps from spans."""

from __future__ import annotations

import pytest

from gpulens.present.dashboard.window import (
    NS,
    RANGES,
    STEPS_S,
    choose_step,
    resolve,
)

LATEST = 1_764_374_400 * NS + 1234 * NS + 5


def test_steps_are_multiples_of_a_minute_and_cap_points() -> None:
    assert all(s % 60 == 0 for s in STEPS_S)
    for span in (60.0, 3600.0, 6 * 3600.0, 86400.0, 7 * 86400.0, 300 * 86400.0):
        step = choose_step(span, 240)
        assert span / step <= 240 or step == STEPS_S[-1]
    assert choose_step(3600.0, 240) == 60
    assert choose_step(7 * 86400.0, 240) == 3600


@pytest.mark.parametrize("name", list(RANGES))
def test_named_range_ends_after_the_newest_reading(name: str) -> None:
    w = resolve(LATEST, name, 240)
    assert w.start_ns < LATEST < w.end_ns
    assert w.end_ns % (w.step_s * NS) == 0
    assert w.end_ns - w.start_ns == RANGES[name] * NS
    assert w.range == name and w.latest_ns == LATEST


def test_explicit_bounds_are_aligned_outward() -> None:
    start, end = LATEST - 1800 * NS - 7, LATEST
    w = resolve(LATEST, "1h", 240, start, end)
    assert w.range == "" and w.step_s == 60
    assert w.start_ns <= start and w.end_ns >= end
    assert w.start_ns % (60 * NS) == 0 and w.end_ns % (60 * NS) == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"range_name": "2h"}, "range '2h' is not one of"),
        ({"start_ns": 10 * NS, "end_ns": 5 * NS}, "is not before end_ns"),
        ({"start_ns": 0, "end_ns": 400 * 86400 * NS}, "at most 366 days"),
    ],
)
def test_bad_windows_say_what_is_wrong(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve(LATEST, **kwargs)  # type: ignore[arg-type]


def test_empty_store_gives_a_window_too() -> None:
    w = resolve(None, "1h")
    assert w.end_ns > w.start_ns >= 0


def test_the_api_default_range_is_the_dashboard_default() -> None:
    import inspect

    from gpulens.present.dashboard.window import DEFAULT_RANGE
    from gpulens.present.web.params import window_query

    assert inspect.signature(window_query).parameters["range_"].default == DEFAULT_RANGE
