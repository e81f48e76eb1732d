"""Reading untrusted files within limits: gzip inflated on the fly, bytes and lines counted.

`Limits` carries the `limits.*` settings (app/ reads the configuration and passes them down;
collect/ reads none). `BoundedReader` reads a plain or gzip file and counts the bytes it
yields against `max_inflated_bytes`; `numbered_lines` yields its lines and refuses one longer
than `max_line_bytes`. Past a limit: `InputTooLarge`, naming the input, the limit and the
setting. Damaged gzip data: the caller's error type, naming the input.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from gpulens.errors import GpulensError, InputTooLarge

GZIP_MAGIC = b"\x1f\x8b"
CHUNK = 1 << 20

#: builds the caller's error for damaged input from a detail ("the gzip data ends early")
Damaged = Callable[[str], GpulensError]


@dataclass(frozen=True, slots=True)
class Limits:
    """The `limits.*` settings that apply to captures and CSV exports (defaults as documented)."""

    max_inflated_bytes: int = 4 * 1024**3
    max_line_bytes: int = 4 * 1024**2
    max_string_bytes: int = 1024**2
    max_nesting: int = 64


DEFAULT_LIMITS = Limits()


def too_large(source: str, what: str, limit: int, setting: str) -> InputTooLarge:
    """The one-line error for an input past `limits.<setting>`."""
    env = "GPULENS_LIMITS_" + setting.upper()
    return InputTooLarge(
        f"{source}: {what} is larger than {limit:,} bytes, the limit limits.{setting}; if the "
        f"input is genuine, raise limits.{setting} (or {env}), otherwise check the file"
    )


class BoundedReader(io.RawIOBase):
    """A binary stream over `raw` that inflates gzip (detected by its magic bytes, several
    members allowed) and raises `InputTooLarge` once more than `limits.max_inflated_bytes`
    were read. zlib errors and truncation raise `damaged(detail)`."""

    def __init__(self, raw: BinaryIO, source: str, limits: Limits, damaged: Damaged) -> None:
        super().__init__()
        self._raw = raw
        self.source = source
        self._limit = limits.max_inflated_bytes
        self._damaged = damaged
        self.inflated = 0
        head = raw.read(2)
        self.gzip = head == GZIP_MAGIC
        self._input = head
        self._zlib = zlib.decompressobj(31) if self.gzip else None
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        if not self._buffer:
            self._buffer = self._fill()
        n = min(len(b), len(self._buffer))
        b[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        return n

    def _fill(self) -> bytes:
        data = self._inflate() if self._zlib is not None else self._plain()
        self.inflated += len(data)
        if self.inflated > self._limit:
            what = "the decompressed content" if self.gzip else "the file"
            raise too_large(self.source, what, self._limit, "max_inflated_bytes")
        return data

    def _plain(self) -> bytes:
        data = self._raw.read(CHUNK)
        if self._input:
            data, self._input = self._input + data, b""
        return data

    def _inflate(self) -> bytes:
        assert self._zlib is not None
        while True:
            if not self._input:
                self._input = self._raw.read(CHUNK)
                if not self._input:
                    if self._zlib.eof:
                        return b""
                    raise self._damaged("the gzip data ends early: the file is truncated")
            try:
                out = self._zlib.decompress(self._input, CHUNK)
            except zlib.error as exc:
                raise self._damaged(f"the gzip data is damaged ({exc})") from None
            self._input = self._zlib.unconsumed_tail
            if self._zlib.eof:
                self._next_member()
            if out:
                return out

    def _next_member(self) -> None:
        """After one gzip member: start the next one, skip zero padding, refuse other bytes."""
        assert self._zlib is not None
        rest = self._zlib.unused_data.lstrip(b"\x00")
        while not rest:
            more = self._raw.read(CHUNK)
            if not more:
                self._input = b""
                return
            rest = more.lstrip(b"\x00")
        if not rest.startswith(GZIP_MAGIC[: len(rest)]):
            raise self._damaged("bytes that are not gzip data follow the gzip stream")
        self._zlib = zlib.decompressobj(31)
        self._input = rest


def open_bounded(raw: BinaryIO, source: str, limits: Limits, damaged: Damaged) -> io.BufferedReader:
    """`raw` (plain or gzip) as a buffered stream bounded by `limits.max_inflated_bytes`."""
    return io.BufferedReader(BoundedReader(raw, source, limits, damaged), CHUNK)


def numbered_lines(stream: BinaryIO, source: str, limits: Limits) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line without its end) of `stream`; a line longer than
    `limits.max_line_bytes` raises `InputTooLarge` before it is held whole."""
    limit = limits.max_line_bytes
    number = 0
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        number += 1
        if line.endswith(b"\n"):
            line = line[:-1]
        if len(line) > limit:
            raise too_large(f"{source}, line {number}", "the line", limit, "max_line_bytes")
        yield number, line.removesuffix(b"\r")
