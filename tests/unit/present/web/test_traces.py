"""Trace names resolve only inside the configured directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens.app.trace_dirs import (
    TraceNotFound,
    TraceOutside,
    TracePathError,
    TraceTooLarge,
    list_traces,
    resolve_trace,
)
from gpulens.app.traces import analyze_files
from gpulens.present.dashboard.traces import trace_page

BIG = 1 << 30


def test_listing_names_files_and_rank_directories(trace_dir: Path) -> None:
    entries = {(e.name, e.kind) for e in list_traces([trace_dir])}
    assert entries == {("run1.json", "file"), ("job", "job"), ("job/rank0.json", "file"),
                       ("job/rank1.json", "file")}  # fmt: skip


def test_a_file_and_a_job_resolve(trace_dir: Path) -> None:
    assert resolve_trace([trace_dir], 0, "run1.json", BIG) == [(trace_dir / "run1.json").resolve()]
    assert len(resolve_trace([trace_dir], 0, "job", BIG)) == 2


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("../etc/passwd", TracePathError),
        ("/etc/passwd", TracePathError),
        ("job/../../x.json", TracePathError),
        ("a\\b.json", TracePathError),
        ("nul\x00.json", TracePathError),
        ("", TracePathError),
        ("missing.json", TraceNotFound),
        ("notes.txt", TracePathError),
    ],
)
def test_bad_names_are_refused(trace_dir: Path, name: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        resolve_trace([trace_dir], 0, name, BIG)


def test_unknown_directory_index(trace_dir: Path) -> None:
    with pytest.raises(TraceNotFound, match="1 directories are configured"):
        resolve_trace([trace_dir], 3, "run1.json", BIG)


def test_symlinks_leaving_the_directory_are_refused(tmp_path: Path, trace_dir: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "secret.json"
    outside.write_text((trace_dir / "run1.json").read_text(), encoding="utf-8")
    (root / "escape.json").symlink_to(outside)
    (root / "up").symlink_to(tmp_path)
    with pytest.raises(TraceOutside):
        resolve_trace([root], 0, "escape.json", BIG)
    with pytest.raises(TraceOutside):
        resolve_trace([root], 0, "up/secret.json", BIG)
    names = {e.name for e in list_traces([root])}
    assert "escape.json" not in names and not any(n.startswith("up") for n in names)


def test_symlink_inside_the_directory_is_fine(tmp_path: Path, trace_dir: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "real.json").write_text((trace_dir / "run1.json").read_text(), encoding="utf-8")
    (tmp_path / "sub" / "alias.json").symlink_to(tmp_path / "real.json")
    assert resolve_trace([tmp_path], 0, "sub/alias.json", BIG) == [tmp_path / "real.json"]
    assert "sub/alias.json" in {e.name for e in list_traces([tmp_path])}


def test_size_limit(trace_dir: Path) -> None:
    with pytest.raises(TraceTooLarge, match="the limit is 100 bytes"):
        resolve_trace([trace_dir], 0, "run1.json", 100)


def test_the_page_names_files_not_server_paths(trace_dir: Path) -> None:
    page = trace_page(analyze_files(resolve_trace([trace_dir], 0, "job", BIG)), "job")
    assert [r.file for r in page.ranks] == ["rank0.json", "rank1.json"]
    assert str(trace_dir) not in repr(page)
    assert page.ranks[0].kernel_classes and page.ranks[0].idle_causes
