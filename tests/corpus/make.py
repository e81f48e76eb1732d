"""Write the corpus of bad inputs into a directory: every case of every module here with `CASES`.

    python tests/corpus/make.py DIR [--size BYTES] [--only MODULE]

Each module of tests/corpus/ that defines `CASES` (a mapping name -> function(dir, size) -> Path)
gets a subdirectory of DIR named after it, holding one file per case. Nothing is committed: the
files are made on demand, at any size (gzip shapes count their inflated size).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent

Case = Callable[[Path, int], Path]


def modules() -> dict[str, Mapping[str, Case]]:
    """Each module of the corpus that has `CASES`, by name."""
    if str(HERE.parents[1]) not in sys.path:  # run as a script: `tests.corpus` importable
        sys.path.insert(0, str(HERE.parents[1]))
    found: dict[str, Mapping[str, Case]] = {}
    for info in sorted(pkgutil.iter_modules([str(HERE)]), key=lambda m: m.name):
        if info.name in {"make", "__init__"}:
            continue
        module = importlib.import_module(f"tests.corpus.{info.name}")
        cases = getattr(module, "CASES", None)
        if isinstance(cases, Mapping):
            found[info.name] = cases
    return found


def make(directory: Path, size: int, only: str | None = None) -> list[Path]:
    """Write every case (of module `only`, if given) into `directory`/<module>/; their paths."""
    written = []
    for name, cases in modules().items():
        if only is not None and name != only:
            continue
        target = directory / name
        target.mkdir(parents=True, exist_ok=True)
        written += [case(target, size) for case in cases.values()]
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--size", type=int, default=1 << 20, help="bytes per file [1 MiB]")
    parser.add_argument("--only", help="only this module's cases (e.g. traces)")
    args = parser.parse_args(argv)
    for path in make(args.directory, args.size, args.only):
        print(f"{path.stat().st_size:>14,}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
