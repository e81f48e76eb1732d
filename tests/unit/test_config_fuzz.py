"""Fuzzing `load_config`: random TOML documents (settings with values of every TOML type,
unknown keys, nested tables), random text and bytes, and random environment values. The
only exception that may come out is ConfigError, in one line; each call is quick."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulens.config import SETTINGS, Config, load_config
from gpulens.errors import ConfigError

FUZZ = settings(
    max_examples=200,
    deadline=timedelta(seconds=2),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
    database=None,
)

KEYS = [s.key for s in SETTINGS]
SCALARS: st.SearchStrategy[Any] = st.one_of(
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["nvml", "host", "simulated", "0.5", "H100=4.5", "127.0.0.1:1", ""]),
    st.datetimes(),
    st.dates(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


def toml_key(key: str) -> str:
    return (
        key
        if key.replace("_", "").replace("-", "").isalnum() and key.isascii()
        else (json.dumps(key))
    )


def toml_value(value: Any) -> str:
    """`value` as TOML writes it (strings as JSON strings, which TOML reads the same)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("-inf" if value < 0 else "inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value) if value.bit_length() < 4000 else "9" * 1300
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items())
        return "{" + items + "}"
    return value.isoformat()  # dates and datetimes


@st.composite
def documents(draw: st.DrawFn) -> str:
    """A TOML document: some settings (or unknown keys) as dotted keys, with any values."""
    keys = draw(st.lists(st.sampled_from(KEYS) | st.text(min_size=1, max_size=12), max_size=6))
    lines = [f"{'.'.join(toml_key(p) for p in k.split('.'))} = {toml_value(draw(VALUES))}"
             for k in dict.fromkeys(keys)]  # fmt: skip
    return "\n".join(lines) + "\n"


ENV = st.dictionaries(
    st.sampled_from([s.env_name for s in SETTINGS]),
    st.text(max_size=30) | st.sampled_from(["1e400", "nan", "-inf", "9" * 5000, "0x10", "true"]),
    max_size=5,
)


def load(path: Path, text: str | bytes, env: dict[str, str]) -> Config | None:
    """`load_config` on `text` written to `path`; None when refused with one clear line."""
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    else:
        path.write_bytes(text)
    try:
        return load_config(path, env=env)
    except ConfigError as exc:
        message = str(exc)
        assert message and "\n" not in message, message
        assert len(message) < 4000, message[:200]
        return None


@FUZZ
@given(text=documents(), env=ENV)
def test_toml_documents(tmp_path: Path, text: str, env: dict[str, str]) -> None:
    load(tmp_path / "gpulens.toml", text, env)


@FUZZ
@given(text=st.text(max_size=300) | st.binary(max_size=300), env=ENV)
def test_any_text_or_bytes(tmp_path: Path, text: str | bytes, env: dict[str, str]) -> None:
    load(tmp_path / "gpulens.toml", text, env)


@FUZZ
@given(env=ENV)
def test_environment_values(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = load(tmp_path / "empty.toml", "", env)
    if cfg is not None:  # what was accepted has the declared type
        for s in SETTINGS:
            value = cfg.get(s.key)
            assert (
                value is None
                or isinstance(value, s.type)
                or (s.type is float and isinstance(value, int))
            ), (s.key, value)
