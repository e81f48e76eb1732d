"""BoundedReader and numbered_lines: gzip inflated within limits.max_inflated_bytes, damaged
gzip named, lines longer than limits.max_line_bytes refused before they are held."""

from __future__ import annotations

import gzip
import io

import pytest

from gpulens.collect.inputs import Limits, numbered_lines, open_bounded
from gpulens.errors import CollectError, InputTooLarge

ROWS = b"".join(b"%d,n%d,%d\n" % (i, i % 4, i % 100) for i in range(20_000))


def _open(data: bytes, **limits: int) -> io.BufferedReader:
    def damaged(detail: str) -> CollectError:
        return CollectError(f"x.gz: {detail}")

    return open_bounded(io.BytesIO(data), "x.gz", Limits(**limits), damaged)


def test_plain_and_gzip_read_the_same_bytes() -> None:
    assert _open(ROWS).read() == ROWS
    assert _open(gzip.compress(ROWS)).read() == ROWS


def test_members_and_zero_padding_are_read_like_gzip_does() -> None:
    data = gzip.compress(ROWS[:1000]) + gzip.compress(ROWS[1000:]) + bytes(100)
    assert gzip.decompress(data) == ROWS
    assert _open(data).read() == ROWS


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        (gzip.compress(ROWS)[:-20], "ends early"),
        (gzip.compress(ROWS) + b"trailing", "not gzip data"),
        (gzip.compress(ROWS)[:10] + b"\x07" + gzip.compress(ROWS)[11:], "damaged"),
        (gzip.compress(ROWS)[:-8] + b"\x00\x00\x00\x00" + gzip.compress(ROWS)[-4:], "damaged"),
    ],
)
def test_damaged_gzip_raises_the_callers_error(data: bytes, detail: str) -> None:
    with pytest.raises(CollectError, match=f"x.gz: .*{detail}"):
        _open(data).read()


def test_inflated_bytes_are_counted_for_gzip_and_plain_alike() -> None:
    bomb = gzip.compress(bytes(64 << 20))
    assert len(bomb) < 1 << 20
    stream = _open(bomb, max_inflated_bytes=8 << 20)
    with pytest.raises(InputTooLarge, match=r"x\.gz: the decompressed content .*8,388,608"):
        while stream.read(1 << 20):
            pass
    with pytest.raises(InputTooLarge, match=r"limits\.max_inflated_bytes"):
        _open(bytes(9 << 20), max_inflated_bytes=8 << 20).read()


def test_a_long_line_is_refused_by_its_number() -> None:
    data = b"a\n" + b"b" * 300 + b"\n" + b"c" * 301
    lines = numbered_lines(_open(data), "x.gz", Limits(max_line_bytes=300))
    assert next(lines) == (1, b"a")
    assert next(lines) == (2, b"b" * 300)
    with pytest.raises(InputTooLarge, match=r"x\.gz, line 3: the line .*limits\.max_line_bytes"):
        next(lines)
    crlf = numbered_lines(_open(b"a\r\nb"), "x", Limits())
    assert list(crlf) == [(1, b"a"), (2, b"b")]
