"""Column-map options: parsing, validation against the catalog, presets."""

from __future__ import annotations

import pytest

from gpulens.collect.csv_import import (
    PRESETS,
    ColumnMap,
    MetricColumn,
    column_map_from_options,
    get_preset,
    parse_label_option,
    parse_map_option,
    parse_set_option,
)
from gpulens.errors import ConfigError
from gpulens.model import Kind


def test_map_option_with_and_without_unit() -> None:
    assert parse_map_option("util=gpu_util_ratio:percent") == MetricColumn(
        "util", "gpu_util_ratio", "percent"
    )
    assert parse_map_option(" mem = memory_used_bytes:MiB ").factor == 1024 * 1024
    assert parse_map_option("p=power_watts:mW").factor == pytest.approx(1e-3)
    assert parse_map_option("u=gpu_util_ratio:%").unit == "percent"
    assert parse_map_option("x=gpu_util_ratio").factor == 1.0


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("util", "expected COLUMN=FIELD"),
        ("util=gpu_util", "did you mean"),
        ("util=gpu_util_ratio:mib", "converts to bytes"),
        ("util=gpu_util_ratio:furlongs", "unknown unit"),
        ("=gpu_util_ratio", "expected"),
    ],
)
def test_bad_map_options(spec: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_map_option(spec)


def test_label_and_set_options() -> None:
    assert parse_label_option("container_ip=pod") == ("container_ip", "pod")
    assert parse_set_option("source=acme") == ("source", "acme")
    for bad in ("x=ts", "x=Pod", "x=gpu_util_ratio", "x=date"):
        with pytest.raises(ConfigError, match="cannot be a label"):
            parse_label_option(bad)


def test_column_map_from_options_and_kinds() -> None:
    m = column_map_from_options(
        "time",
        ["util=gpu_util_ratio:percent", "qps=app_samples_per_second"],
        ["node=host", "ip=pod"],
        ["source=x"],
        time_unit="ms",
    )
    assert m.kinds == (Kind.GPU, Kind.APP)
    assert m.columns == ("time", "node", "ip", "util", "qps")
    assert m.label_keys == ("host", "pod", "source")


def test_column_map_validation() -> None:
    with pytest.raises(ConfigError, match="at least one metric"):
        ColumnMap("t", ())
    with pytest.raises(ConfigError, match="time-unit"):
        ColumnMap("t", (MetricColumn("u", "gpu_util_ratio"),), time_unit="fortnights")
    with pytest.raises(ConfigError, match="two columns"):
        ColumnMap("t", (MetricColumn("a", "gpu_util_ratio"), MetricColumn("b", "gpu_util_ratio")))
    with pytest.raises(ConfigError, match="twice"):
        column_map_from_options("t", ["u=gpu_util_ratio"], ["a=pod", "b=pod"])


def test_alibaba_preset_picks_a_map_per_file() -> None:
    preset = get_preset("alibaba-genai-2026")
    duty = preset("pod_gpu_duty_cycle_anon.csv")
    mem = preset("pod_gpu_memory_used_bytes_anon.csv")
    qps = preset("qps.csv")
    assert duty is not None and mem is not None and qps is not None
    assert duty.metrics == (MetricColumn("value", "gpu_util_ratio", "percent"),)
    assert mem.metrics == (MetricColumn("value", "memory_used_bytes"),)
    assert qps.kinds == (Kind.APP,)
    assert preset("lora_request_trace.csv") is None
    assert "alibaba-genai-2026" in PRESETS
    with pytest.raises(ConfigError, match="unknown preset"):
        get_preset("nope")
