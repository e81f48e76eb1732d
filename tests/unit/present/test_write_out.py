"""Output files that cannot be written are one clear error naming them (as root too: a path
under a regular file cannot be created by anyone)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens.app import profiles
from gpulens.errors import StoreError
from gpulens.present.console import write_out


def test_write_out_names_the_file_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x", encoding="utf-8")
    with pytest.raises(
        StoreError, match=r"cannot write '.*a-file/report.html' \(Not a directory\)"
    ):
        write_out("<html>", blocker / "report.html")
    write_out("ok", tmp_path / "report.txt")
    assert (tmp_path / "report.txt").read_text(encoding="utf-8") == "ok"


def test_a_profile_request_into_an_unwritable_data_dir_says_so(tmp_path: Path) -> None:
    blocker = tmp_path / "runs"
    blocker.write_text("x", encoding="utf-8")
    with pytest.raises(StoreError, match=r"cannot write the profile request .*--data-dir"):
        profiles.request(blocker, "job-1", 3)
