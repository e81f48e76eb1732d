from __future__ import annotations

from pathlib import Path

import pytest

from corpus.config import CASES
from gpulens.config import SETTINGS, load_config
from gpulens.errors import ConfigError


def test_defaults_validate_and_fill_host_and_data_dir() -> None:
    cfg = load_config(env={})
    assert cfg.get("collect.interval_seconds") == 1.0
    assert cfg.get("collect.timeout_seconds") == pytest.approx(0.9)
    assert cfg.get("store.flush_seconds") == 10.0
    assert cfg.host
    assert cfg.data_dir.name == "gpulens"
    assert all(src == "default" for src in cfg.sources.values())


def test_file_then_env_then_overrides(tmp_path: Path) -> None:
    f = tmp_path / "gpulens.toml"
    f.write_text(
        'data_dir = "/srv/gpulens"\n[collect]\ninterval_seconds = 5\n'
        'collectors = ["nvml", "host"]\n[store]\nflush_seconds = 30\n'
    )
    cfg = load_config(
        f,
        env={"GPULENS_STORE_FLUSH_SECONDS": "20", "GPULENS_UNRELATED": "x"},
        overrides={"collect.interval_seconds": 2.0, "store.retention_days": None},
    )
    assert cfg.data_dir == Path("/srv/gpulens")
    assert cfg.get("collect.interval_seconds") == 2.0
    assert cfg.sources["collect.interval_seconds"] == "the command line"
    assert cfg.get("store.flush_seconds") == 20.0
    assert "GPULENS_STORE_FLUSH_SECONDS" in cfg.sources["store.flush_seconds"]
    assert cfg.get("collect.collectors") == ["nvml", "host"]
    assert cfg.get("store.retention_days") == 30


@pytest.mark.parametrize(
    ("env", "fragments"),
    [
        (
            {"GPULENS_COLLECT_INTERVAL_SECONDS": "0.01"},
            ["collect.interval_seconds", "'0.01'", "between 0.1 and 60"],
        ),
        ({"GPULENS_COLLECT_INTERVAL_SECONDS": "fast"}, ["'fast'", "a number"]),
        ({"GPULENS_STORE_RETENTION_DAYS": "1.5"}, ["store.retention_days", "an integer"]),
        ({"GPULENS_COLLECT_COLLECTORS": "nvml,gpuz"}, ["'gpuz'", "simulated, nvml"]),
        ({"GPULENS_COLLECT_INTERVAL_SECONDS": "nan"}, ["'nan'"]),
    ],
)
def test_bad_values_name_key_value_and_allowed(env: dict[str, str], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(env=env)
    message = str(err.value)
    for fragment in fragments:
        assert fragment in message
    assert "environment variable" in message


def test_unknown_key_in_file_lists_known_ones(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[collect]\ninterval = 5\n")
    with pytest.raises(ConfigError, match=r"unknown setting 'collect.interval'.*interval_seconds"):
        load_config(f, env={})


def test_missing_and_invalid_files_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[collect\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, env={})


def test_timeout_may_not_exceed_interval() -> None:
    with pytest.raises(ConfigError, match="timeout_seconds"):
        load_config(env={"GPULENS_COLLECT_TIMEOUT_SECONDS": "3"})
    cfg = load_config(env={"GPULENS_COLLECT_INTERVAL_SECONDS": "10"})
    assert cfg.get("collect.timeout_seconds") == pytest.approx(9.0)


def test_every_setting_has_help_and_an_env_name() -> None:
    for s in SETTINGS:
        assert s.help.endswith(".") or s.help.endswith(")")
        assert s.env_name.startswith("GPULENS_") and s.env_name.isupper()


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("size", [10, 20_000])
def test_a_bad_config_file_is_one_config_error_naming_it(
    tmp_path: Path, name: str, size: int
) -> None:
    path = CASES[name](tmp_path, size)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    assert len(message) < 4000  # the offending value is quoted, not copied whole


@pytest.mark.parametrize(
    "env",
    [
        {"GPULENS_STORE_RETENTION_DAYS": "9" * 5000},
        {"GPULENS_DATA_DIR": "/srv/a\x00b"},
        {"GPULENS_COLLECT_COLLECTORS": "host,\x00"},
    ],
)
def test_a_bad_environment_value_is_one_short_config_error(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(env=env)
    assert next(iter(env)) in str(err.value) and len(str(err.value)) < 1000
