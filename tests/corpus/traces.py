"""Bad and oversized Kineto trace shapes for `gpulens trace` and the upload: one generator per
shape, none committed as a file.

Each `CASES[name](directory, size)` writes one file of about `size` bytes into `directory` and
returns its path; for a gzip file `size` is the inflated size (what `limits.max_inflated_bytes`
counts), so a bomb of 2 GB is a file of a few MB. Files are written in blocks: memory stays small
whatever the size. `VALID` names the shapes that are valid traces (they must load); every other
shape must end in one TraceFormatError or InputTooLarge.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

BLOCK = 1 << 20
# one Kineto kernel event, as the profiler writes it (the `ts` varies)
EVENT = (
    '{{"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0, "tid": 7, '
    '"ts": {ts}, "dur": 30, "args": {{"stream": 7, "correlation": {ts}}}}}'
)
TINY = '{{"ph":"i","ts":{ts}}}'
HEAD = b'{"schemaVersion": 1, "traceEvents": ['
TAIL = b'], "displayTimeUnit": "ms"}'


def _write(path: Path, parts: Iterator[bytes]) -> Path:
    with path.open("wb") as f:
        for part in parts:
            f.write(part)
    return path


def _gzip(path: Path, parts: Iterator[bytes]) -> Path:
    """`parts` gzip-compressed into `path` (level 9: a bomb of zeros shrinks ~1000×)."""
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9) as gz:
        for part in parts:
            gz.write(part)
    return path


def _repeat(unit: bytes, size: int) -> Iterator[bytes]:
    """`unit` repeated to `size` bytes, a block at a time."""
    block = unit * max(1, BLOCK // len(unit))
    left = size
    while left > 0:
        part = block[:left]
        left -= len(part)
        yield part


def _events(size: int, template: str, sep: bytes = b", ") -> Iterator[bytes]:
    """Events of `template` (ts 0, 1, ...) joined by `sep`, about `size` bytes in all."""
    written, ts, batch = 0, 0, []
    while written < size:
        text = (template.format(ts=ts)).encode()
        batch.append(text)
        written += len(text) + len(sep)
        ts += 1
        if len(batch) == 4096:
            yield sep.join(batch) + (sep if written < size else b"")
            batch = []
    if batch:
        yield sep.join(batch)


def valid(directory: Path, size: int) -> Path:
    """A valid trace of kernel events, one per line (as the profiler writes them)."""
    body = _events(size - len(HEAD) - len(TAIL), EVENT, b",\n")
    return _write(directory / "valid.json", iter([HEAD, *body, TAIL]))


def valid_gzip(directory: Path, size: int) -> Path:
    """`valid`, gzip-compressed (`size`: the inflated size)."""
    body = _events(size - len(HEAD) - len(TAIL), EVENT, b",\n")
    return _gzip(directory / "valid.json.gz", iter([HEAD, *body, TAIL]))


def long_line(directory: Path, size: int) -> Path:
    """A valid trace written on one line: no newline at all (a JSON trace is not line-based)."""
    body = _events(size - len(HEAD) - len(TAIL), EVENT, b",")
    return _write(directory / "long_line.json", iter([HEAD, *body, TAIL]))


def gzip_zeros(directory: Path, size: int) -> Path:
    """A gzip bomb: `size` NUL bytes inflated from about size / 1000 compressed."""
    return _gzip(directory / "zeros.json.gz", _repeat(b"\0", size))


def gzip_events(directory: Path, size: int) -> Path:
    """A gzip bomb that is valid JSON as far as it goes: one event repeated, never closed."""
    return _gzip(directory / "events_bomb.json.gz", iter([HEAD, *_repeat(b'{"ph":"i"}, ', size)]))


def huge_string(directory: Path, size: int) -> Path:
    """One event whose name is a single string of about `size` bytes."""
    head = HEAD + b'{"ph": "X", "ts": 1, "dur": 1, "name": "'
    tail = b'"}' + TAIL
    body = _repeat(b"a", size - len(head) - len(tail))
    return _write(directory / "huge_string.json", iter([head, *body, tail]))


def huge_metadata_string(directory: Path, size: int) -> Path:
    """A string of about `size` bytes before `traceEvents` (in the trace's metadata)."""
    head = b'{"comment": "'
    tail = b'", "traceEvents": []}'
    body = _repeat(b"b", size - len(head) - len(tail))
    return _write(directory / "huge_metadata.json", iter([head, *body, tail]))


def deep_nesting(directory: Path, size: int) -> Path:
    """One event whose `args` nest objects about size / 10 deep."""
    depth = max(1, size // 10)
    head = HEAD + b'{"ph": "X", "ts": 1, "dur": 1, "args": '
    tail = b"}" + TAIL
    parts = [head, *_repeat(b'{"a": ', 6 * depth), b"1", *_repeat(b"}", depth), tail]
    return _write(directory / "deep.json", iter(parts))


def many_tiny_events(directory: Path, size: int) -> Path:
    """The smallest events there are: `{"ph":"i","ts":N}`, about size / 20 of them."""
    body = _events(size - len(HEAD) - len(TAIL), TINY, b",")
    return _write(directory / "tiny_events.json", iter([HEAD, *body, TAIL]))


def whitespace(directory: Path, size: int) -> Path:
    """Nothing but `size` bytes of spaces and newlines."""
    return _write(directory / "whitespace.json", _repeat(b" " * 63 + b"\n", size))


def whitespace_around(directory: Path, size: int) -> Path:
    """A small valid trace inside `size` bytes of whitespace (before, between the events and
    after): valid."""
    pad = size // 4
    parts = [
        *_repeat(b" ", pad),
        HEAD,
        EVENT.format(ts=1).encode(),
        b",",
        *_repeat(b"\n", pad),
        EVENT.format(ts=2).encode(),
        TAIL,
        *_repeat(b"\t", size - 2 * pad),
    ]
    return _write(directory / "whitespace_around.json", iter(parts))


def no_trace_events(directory: Path, size: int) -> Path:
    """A JSON object of `size` bytes without a top-level `traceEvents`, but one nested deeper."""
    head = b'{"inner": {"traceEvents": [' + EVENT.format(ts=1).encode() + b"]}"
    member = b', "k%09d": {"x": [1, 2, 3], "y": "abcdefghijklmnop"}'
    count = max(1, (size - len(head)) // len(member % 0))

    def members() -> Iterator[bytes]:
        for start in range(0, count, 4096):
            yield b"".join(member % i for i in range(start, min(count, start + 4096)))

    return _write(directory / "no_trace_events.json", iter([head, *members(), b"}"]))


def garbage(directory: Path, size: int) -> Path:
    """Random-looking bytes (not JSON from the first byte)."""
    seed = zlib.compress(bytes(range(256)) * 64)
    return _write(directory / "garbage.json", _repeat(seed, size))


def bad_times(directory: Path, size: int) -> Path:
    """A valid-looking trace whose last event has `"ts": 1e308` (beyond 64-bit nanoseconds)."""
    body = _events(size - len(HEAD) - len(TAIL) - 64, EVENT, b",\n")
    last = b',\n{"ph": "X", "ts": 1e308, "dur": 1}'
    return _write(directory / "bad_times.json", iter([HEAD, *body, last, TAIL]))


def string_times(directory: Path, size: int) -> Path:
    """A valid-looking trace whose last event has `"ts": "abc"`."""
    body = _events(size - len(HEAD) - len(TAIL) - 64, EVENT, b",\n")
    last = b',\n{"ph": "X", "ts": "abc", "dur": 1}'
    return _write(directory / "string_times.json", iter([HEAD, *body, last, TAIL]))


def truncated(directory: Path, size: int) -> Path:
    """A valid trace cut off in the middle of an event."""
    body = _events(size - len(HEAD), EVENT, b",\n")
    return _write(directory / "truncated.json", iter([HEAD, *body, b',\n{"ph": "X", "ts']))


CASES: dict[str, Callable[[Path, int], Path]] = {
    "valid": valid,
    "valid_gzip": valid_gzip,
    "long_line": long_line,
    "gzip_zeros": gzip_zeros,
    "gzip_events": gzip_events,
    "huge_string": huge_string,
    "huge_metadata_string": huge_metadata_string,
    "deep_nesting": deep_nesting,
    "many_tiny_events": many_tiny_events,
    "whitespace": whitespace,
    "whitespace_around": whitespace_around,
    "no_trace_events": no_trace_events,
    "garbage": garbage,
    "bad_times": bad_times,
    "string_times": string_times,
    "truncated": truncated,
}
VALID = frozenset({"valid", "valid_gzip", "long_line", "many_tiny_events", "whitespace_around"})
