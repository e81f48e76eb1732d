"""Fuzz both parsers: random text, truncations and mutations of real captures.

Nothing but NvidiaSmiParseError may escape, and whatever parses must be well-formed readings.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nvsmi_captures import CAPTURE_DIR, CAPTURES, XML_DIR, XML_FILES, query_gpu_csv

from gpulens import catalog
from gpulens.collect.nvidia_smi import NvidiaSmiParseError, parse_nvsmi_xml, parse_query_csv
from gpulens.model import Reading

TS = 1
FUZZ = settings(
    max_examples=int(os.environ.get("GPULENS_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
VALUES = st.sampled_from(
    [
        "",
        "N/A",
        "[N/A]",
        "-1",
        "1e400",
        "nan",
        "inf",
        "0x",
        "P99",
        "Active",
        "Yes",
        "101 %",
        "12 parsecs",
        "<",
        "&",
        "]]>",
        "\x00",
        "\ud800",
        "99999999999999999999999 MiB",
        "[Insufficient Permissions]",
        "Unknown Error",
        ",",
        "\n",
    ]
)


def _check(readings: list[Reading]) -> None:
    for r in readings:
        assert isinstance(r, Reading)
        for metric, value in r.values.items():
            catalog.get(metric)
            assert isinstance(value, float)
            assert value == value and value not in (float("inf"), float("-inf"))


def _run(parse: object, text: str) -> None:
    try:
        readings = parse(text, "fuzz", TS, "h")  # type: ignore[operator]
    except NvidiaSmiParseError as exc:
        assert exc.source == "fuzz"
        assert "fuzz" in str(exc)
        return
    _check(readings)


@pytest.fixture(scope="module")
def xml_texts(shared: Path) -> list[str]:
    return [(shared / XML_DIR / n).read_text("utf-8") for n in XML_FILES]


@pytest.fixture(scope="module")
def csv_texts(shared: Path) -> list[str]:
    out = []
    for name in CAPTURES.values():
        text = (shared / CAPTURE_DIR / name).read_text("utf-8")
        out += [query_gpu_csv(text, "idle"), query_gpu_csv(text, "load")]
    return out


@FUZZ
@given(st.text())
def test_random_text(text: str) -> None:
    _run(parse_nvsmi_xml, text)
    _run(parse_query_csv, text)


@FUZZ
@given(st.binary())
def test_random_bytes(data: bytes) -> None:
    text = data.decode("utf-8", errors="surrogateescape")
    _run(parse_nvsmi_xml, text)
    _run(parse_query_csv, text)


@FUZZ
@given(st.data())
def test_truncated_xml(xml_texts: list[str], data: st.DataObject) -> None:
    text = data.draw(st.sampled_from(xml_texts))
    cut = data.draw(st.integers(0, len(text)))
    _run(parse_nvsmi_xml, text[:cut])


@FUZZ
@given(st.data())
def test_truncated_csv(csv_texts: list[str], data: st.DataObject) -> None:
    text = data.draw(st.sampled_from(csv_texts))
    cut = data.draw(st.integers(0, len(text)))
    _run(parse_query_csv, text[:cut])


@FUZZ
@given(st.data())
def test_mutated_xml_values(xml_texts: list[str], data: st.DataObject) -> None:
    text = data.draw(st.sampled_from(xml_texts))
    # Replace the text of a few elements (between '>' and '</') with hostile values.
    for _ in range(data.draw(st.integers(1, 5))):
        end = text.find("</", data.draw(st.integers(0, len(text) - 1)))
        if end < 0:
            continue
        start = text.rfind(">", 0, end) + 1
        text = text[:start] + data.draw(VALUES) + text[end:]
    _run(parse_nvsmi_xml, text)


@FUZZ
@given(st.data())
def test_mutated_csv_cells(csv_texts: list[str], data: st.DataObject) -> None:
    lines = data.draw(st.sampled_from(csv_texts)).strip().splitlines()
    cells = lines[-1].split(",")
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(cells) - 1))
        cells[i] = " " + data.draw(VALUES)
    lines[-1] = ",".join(cells)
    _run(parse_query_csv, "\n".join(lines))
