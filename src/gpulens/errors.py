"""The error family. The library raises these; the CLI maps them to one line and an exit code."""

from __future__ import annotations


class GpulensError(Exception):
    """Base of every error gpulens raises on purpose. `exit_code` is what the CLI returns."""

    exit_code = 1


class ConfigError(GpulensError):
    """A setting is wrong: names the key, quotes the value, says what is allowed."""

    exit_code = 2


class SourceUnavailable(GpulensError):
    """A source cannot work on this machine (library missing, no GPU, endpoint down)."""

    exit_code = 3


class CollectError(GpulensError):
    """A source that works failed on one collection."""

    exit_code = 4


class StoreError(GpulensError):
    """The store cannot be read or written (disk full, permissions, corrupt segment)."""

    exit_code = 5


class TraceFormatError(GpulensError):
    """A profiler trace is not in a format gpulens understands."""

    exit_code = 6


class InputTooLarge(GpulensError):
    """An input passed one of the `limits.*` settings: names the input, the limit and the
    setting."""

    exit_code = 7
