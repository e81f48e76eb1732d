"""Bad TOML configuration files for `gpulens.config.load_config`: one generator per shape.

Each `CASES[name](directory, size)` writes one file into `directory` and returns its path;
`size` scales the shape (nesting depth, digits, bytes). Every one must be refused with a
ConfigError that names the file, never another exception.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def _write(directory: Path, name: str, data: bytes) -> Path:
    path = directory / name
    path.write_bytes(data)
    return path


def not_utf8(directory: Path, size: int) -> Path:
    """A Latin-1 host name: not UTF-8, which TOML requires."""
    return _write(directory, "latin1.toml", b'host = "n\xf6de-' + b"x" * size + b'"\n')


def deep_arrays(directory: Path, size: int) -> Path:
    """`size` nested arrays in one value."""
    return _write(directory, "deep-arrays.toml", b"data_dir = " + b"[" * size + b"]" * size)


def deep_inline_tables(directory: Path, size: int) -> Path:
    """`size` nested inline tables in one value."""
    body = b"{a = " * size + b"1" + b"}" * size
    return _write(directory, "deep-inline.toml", b"collect = " + body + b"\n")


def deep_dotted_table(directory: Path, size: int) -> Path:
    """A table header `size` keys deep."""
    header = b".".join([b"collect"] * size)
    return _write(directory, "deep-table.toml", b"[" + header + b"]\ninterval_seconds = 1\n")


def huge_integer(directory: Path, size: int) -> Path:
    """An integer of `size` digits where an integer is expected."""
    return _write(directory, "huge-int.toml", b"[store]\nretention_days = " + b"9" * size + b"\n")


def huge_integer_for_a_number(directory: Path, size: int) -> Path:
    """An integer past any float (`size` digits, at least 400) where a number is expected."""
    digits = b"9" * max(size, 400)
    return _write(directory, "huge-float.toml", b"[collect]\ninterval_seconds = " + digits + b"\n")


def infinite_integer(directory: Path, size: int) -> Path:
    """`inf` where an integer is expected."""
    return _write(directory, "inf-int.toml", b"[store]\nretention_days = inf\n")


def nul_in_a_path(directory: Path, size: int) -> Path:
    """A NUL character inside the data directory's path."""
    return _write(directory, "nul.toml", b'data_dir = "/srv/a\\u0000' + b"b" * size + b'"\n')


def nul_in_a_list(directory: Path, size: int) -> Path:
    """A NUL character inside a list item."""
    return _write(directory, "nul-list.toml", b'[agent]\ntrace_dirs = ["/t\\u0000x"]\n')


def array_of_tables(directory: Path, size: int) -> Path:
    """`[[collect]]`: a section written as an array of tables."""
    return _write(directory, "array-tables.toml", b"[[collect]]\ninterval_seconds = 1\n" * 2)


def byte_order_mark(directory: Path, size: int) -> Path:
    """A UTF-8 byte order mark before a valid setting (TOML does not allow one)."""
    return _write(directory, "bom.toml", b"\xef\xbb\xbfhost = 'a'\n")


def binary_noise(directory: Path, size: int) -> Path:
    """`size` bytes of NUL and high bytes."""
    return _write(directory, "noise.toml", bytes(i % 256 for i in range(size)))


CASES: dict[str, Callable[[Path, int], Path]] = {
    f.__name__: f
    for f in (
        not_utf8,
        deep_arrays,
        deep_inline_tables,
        deep_dotted_table,
        huge_integer,
        huge_integer_for_a_number,
        infinite_integer,
        nul_in_a_path,
        nul_in_a_list,
        array_of_tables,
        byte_order_mark,
        binary_noise,
    )
}
