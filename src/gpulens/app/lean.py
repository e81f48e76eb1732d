"""What a long-running gpulens process (the agent, `record`) keeps out of its memory.

gpulens never uses pandas, but pyarrow looks for it the first time it converts a Python list
(`pa.array([...])`, `pa.table({...})`): where pandas is installed, that one probe imports it,
about 36 MB of resident memory held for the life of the process only to learn that the list
is not a DataFrame. `keep_pandas_out` answers pyarrow's probe "not installed" before anything
else converts a list. Only the speculative probe is answered: an explicit conversion
(`to_pandas`, `from_pandas`) imports pandas as usual, and so does any library that needs it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class _NoPandas:
    """A meta path finder that reports pandas as not installed (while it is on sys.meta_path)."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"{name} is kept out of this process", name=name)
        return None


def keep_pandas_out() -> bool:
    """Answer pyarrow's probe for pandas "not installed" (once, before the process converts a
    list). False when pandas was imported already (nothing to keep out)."""
    if "pandas" in sys.modules:
        return False
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        import pyarrow as pa

        pa.array([])  # pyarrow's one probe for pandas happens here, and is remembered
    finally:
        sys.meta_path.remove(finder)
    return "pandas" not in sys.modules
