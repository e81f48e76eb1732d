"""Store locations: local paths stay `Path`, URLs become `ObjectPath`, bad URLs one clear error."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from gpulens.config import load_config
from gpulens.errors import ConfigError
from gpulens.store.layout import compacted_name, name_host, name_start_ns, segment_name
from gpulens.store.location import ObjectPath, is_url, open_location, s3_settings


def test_a_local_directory_stays_a_path(tmp_path: Path) -> None:
    assert open_location(str(tmp_path)) == tmp_path
    assert type(open_location(tmp_path)) is type(tmp_path)
    assert open_location("~/x") == Path.home() / "x"
    assert not is_url("C:\\data") and not is_url("relative/dir") and is_url("s3://b/p")


def test_an_s3_url_is_an_object_path_with_its_bucket_and_prefix() -> None:
    where = open_location("s3://my-bucket/fleet/prefix/")
    assert isinstance(where, ObjectPath)
    assert where.key == "my-bucket/fleet/prefix"
    assert str(where) == "s3://my-bucket/fleet/prefix"
    part = where / "gpu" / "date=2026-11-29"
    assert str(part) == "s3://my-bucket/fleet/prefix/gpu/date=2026-11-29"
    assert part.name == "date=2026-11-29" and part.parent.name == "gpu"
    assert (part / "a.parquet").relative_to(where) == "gpu/date=2026-11-29/a.parquet"
    assert isinstance(where.fs, pafs.S3FileSystem)


def test_a_url_without_a_bucket_says_how_to_write_it() -> None:
    with pytest.raises(ConfigError, match=r"names no bucket.*s3://BUCKET/PREFIX"):
        open_location("s3:///prefix")


@pytest.mark.skipif(importlib.util.find_spec("adlfs") is not None, reason="adlfs is installed")
def test_a_scheme_whose_library_is_missing_names_what_to_install() -> None:
    with pytest.raises(ConfigError, match=r"az://.*not installed.*pip install adlfs"):
        open_location("az://container/prefix")


def test_an_unknown_scheme_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown storage scheme 'nosuchfs'"):
        open_location("nosuchfs://bucket/prefix")


def test_s3_settings_come_from_the_config_first_then_the_aws_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://env-endpoint:9000")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    got = s3_settings({"aws_endpoint_url": "http://config-endpoint:9000", "aws_region": None})
    assert got == {"aws_endpoint_url": "http://config-endpoint:9000", "aws_region": "eu-west-1"}


def test_the_config_passes_its_aws_settings_to_the_location(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    toml = tmp_path / "g.toml"
    toml.write_text(
        'data_dir = "s3://bucket/p"\n[store]\naws_endpoint_url = "http://127.0.0.1:9"\n'
        'aws_region = "us-east-2"\n'
    )
    where = load_config(toml).data_dir
    assert isinstance(where, ObjectPath)
    assert where.fs.region == "us-east-2"
    assert str(where) == "s3://bucket/p"
    assert load_config(overrides={"data_dir": str(tmp_path)}).data_dir == tmp_path


def test_names_carry_their_host_for_per_host_compaction() -> None:
    seg = segment_name("node-7.example", 123)
    assert name_host(seg) == "node_7.example" and name_start_ns(seg) == 123
    txn = segment_name("n1", 5, prefix="txn-abcdef0123456789-")
    assert name_host(txn) == "n1" and name_start_ns(txn) == 5
    cmp = compacted_name(9, "n1")
    assert name_host(cmp) == "n1" and name_start_ns(cmp) == 9
    assert name_host(compacted_name(9)) is None and name_start_ns(compacted_name(9)) == 9
