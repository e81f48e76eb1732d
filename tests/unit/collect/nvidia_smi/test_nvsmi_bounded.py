"""nvidia-smi parsers within limits: no entity declared or expanded, bytes that are not the
declared encoding refused by line, element text, nesting and count bounded, and the streaming
forms equal to the whole-text ones on real captures."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from nvsmi_captures import CAPTURE_DIR, CAPTURES, XML_DIR, XML_FILES, query_gpu_csv

from gpulens.collect.inputs import Limits
from gpulens.collect.nvidia_smi import (
    NvidiaSmiParseError,
    iter_query_csv,
    parse_nvsmi_xml,
    parse_nvsmi_xml_stream,
    parse_query_csv,
)
from gpulens.errors import InputTooLarge


def _xml(shared: Path, name: str = "a10g.xml") -> str:
    text = (shared / XML_DIR / name).read_text()
    assert text.startswith('<?xml version="1.0" ?>\n<!DOCTYPE')  # no encoding: UTF-8
    return text


def _with_doctype(text: str, subset: str) -> str:
    start = text.index("<!DOCTYPE")
    end = text.index(">", start) + 1
    return text[:start] + f"<!DOCTYPE nvidia_smi_log [\n{subset}\n]>" + text[end:]


@pytest.mark.parametrize("name", XML_FILES)
def test_the_stream_parse_equals_the_text_parse(shared: Path, name: str) -> None:
    raw = (shared / XML_DIR / name).read_bytes()
    whole = parse_nvsmi_xml(raw.decode(), name, 1, "h")
    assert parse_nvsmi_xml(raw, name, 1, "h") == whole
    assert parse_nvsmi_xml_stream(io.BytesIO(raw), name, 1, "h") == whole


@pytest.mark.parametrize(
    ("subset", "uuid", "message"),
    [
        ('<!ENTITY id SYSTEM "file:///etc/hostname">', "GPU-&id;", "declares the entity 'id'"),
        ('<!ENTITY id "1234">', "GPU-&id;", "declares the entity 'id'"),
        ('<!ENTITY % p SYSTEM "http://example.invalid/x.dtd"> %p;', "GPU-1", "entity 'p'"),
    ],
)
def test_entities_are_refused(shared: Path, subset: str, uuid: str, message: str) -> None:
    text = _xml(shared)
    start = text.index("<uuid>") + len("<uuid>")
    text = text[:start] + uuid + text[text.index("</uuid>") :]
    with pytest.raises(NvidiaSmiParseError, match=message):
        parse_nvsmi_xml(_with_doctype(text, subset), "x.xml", 1, "h")


def test_a_reference_to_an_undeclared_entity_is_refused(shared: Path) -> None:
    text = _xml(shared).replace("<uuid>GPU-", "<uuid>GPU-&id;", 1)  # the DTD is external
    with pytest.raises(NvidiaSmiParseError, match=r"refers to the entity &id;"):
        parse_nvsmi_xml(text, "x.xml", 1, "h")


def test_bytes_that_are_not_utf8_are_refused_by_line(shared: Path) -> None:
    raw = _xml(shared).encode().replace(b"NVIDIA A10G", b"NVIDIA A10G \xe9dition", 1)
    line = raw[: raw.index(b"\xe9")].count(b"\n") + 1
    with pytest.raises(NvidiaSmiParseError, match=rf"x\.xml, line {line}: the bytes are not UTF-8"):
        parse_nvsmi_xml_stream(io.BytesIO(raw), "x.xml", 1, "h")


def test_text_nesting_and_padding_are_bounded(shared: Path) -> None:
    text = _xml(shared)
    long_name = text.replace("NVIDIA A10G", "A" * 5000, 1)
    with pytest.raises(InputTooLarge, match=r"the text of <product_name> .*max_string_bytes"):
        parse_nvsmi_xml(long_name, "x.xml", 1, "h", Limits(max_string_bytes=4096))
    deep = text.replace("<fan_speed>", "<a>" * 70 + "</a>" * 70 + "<fan_speed>", 1)
    with pytest.raises(InputTooLarge, match=r"nested more than 64 deep.*limits\.max_nesting"):
        parse_nvsmi_xml(deep, "x.xml", 1, "h")
    padded = text.replace("<gpu ", " " * 100_000 + "\n<gpu ", 1)  # layout is not text
    limits = Limits(max_string_bytes=4096)
    assert parse_nvsmi_xml(padded, "x.xml", 1, "h", limits) == parse_nvsmi_xml(text, "x", 1, "h")


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_csv_lines_parse_like_the_text(shared: Path, name: str) -> None:
    text = query_gpu_csv((shared / CAPTURE_DIR / CAPTURES[name]).read_text(), "load")
    pairs = enumerate(text.split("\n"), start=1)
    assert list(iter_query_csv(pairs, name, 1, "h")) == parse_query_csv(text, name, 1, "h")


def test_a_csv_of_identity_fields_only_is_refused(shared: Path) -> None:
    text = query_gpu_csv((shared / CAPTURE_DIR / CAPTURES["h100"]).read_text(), "load")
    header, *rows = [line.split(",") for line in text.strip().splitlines()]
    keep = [i for i, cell in enumerate(header) if cell.strip() in ("name", "uuid")]
    assert len(keep) == 2
    cut = "\n".join(",".join(row[i] for i in keep) for row in [header, *rows])
    with pytest.raises(NvidiaSmiParseError, match=r"line 1: the header names no field gpulens"):
        parse_query_csv(cut, "x.csv", 1, "h")
