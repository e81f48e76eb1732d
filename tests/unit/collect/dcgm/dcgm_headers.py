"""Read DCGM field ids out of NVIDIA's `dcgm_fields.h` headers (test helper, never shipped).

`#define NAME 123` gives an id; `#define OLD NEW` is an alias resolved through NEW (to any
depth). The 4.6 header's deprecated block also annotates each alias with its id in a trailing
comment (`#define DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_GPU_UTIL_RATIO // 203`): the comment is
checked against the resolved id. Defines whose value is an expression (`A - B + 1`) are not
field ids and are ignored.
"""

from __future__ import annotations

import re
from pathlib import Path

_DEFINE = re.compile(
    r"^\s*#\s*define\s+(DCGM_FI_\w+)\s+([A-Za-z_0-9]+)\s*(?://\s*(\d+)\s*)?(?:/\*.*)?$"
)

HEADER_DIR = Path("data/telemetry/NVIDIA_DCGM/dcgmlib")
HEADERS = ("dcgm_fields.h", "dcgm_fields.v4.5.3.h")


def field_ids(header: Path) -> dict[str, int]:
    """Every `DCGM_FI_*` name in `header` → its numeric field id (aliases resolved)."""
    raw: dict[str, str] = {}
    annotated: dict[str, int] = {}
    for line in header.read_text(encoding="utf-8").splitlines():
        m = _DEFINE.match(line)
        if not m:
            continue
        name, value, comment = m.groups()
        raw[name] = value
        if comment is not None:
            annotated[name] = int(comment)

    resolved: dict[str, int] = {}

    def resolve(name: str, seen: tuple[str, ...] = ()) -> int | None:
        if name in resolved:
            return resolved[name]
        value = raw.get(name)
        if value is None or name in seen:
            return None
        if value.isdigit():
            result: int | None = int(value)
        elif value.startswith("0x"):
            result = int(value, 16)
        else:
            result = resolve(value, (*seen, name))
        if result is not None:
            resolved[name] = result
        return result

    for name in raw:
        resolve(name)
    for name, comment_id in annotated.items():
        if resolved.get(name) != comment_id:
            raise AssertionError(
                f"{header.name}: {name} is annotated // {comment_id} but resolves to "
                f"{resolved.get(name)}"
            )
    return resolved


def names_by_id(shared: Path, ids: set[int]) -> dict[int, set[str]]:
    """The names both headers give each id in `ids`."""
    out: dict[int, set[str]] = {i: set() for i in ids}
    for header in HEADERS:
        for name, fid in field_ids(shared / HEADER_DIR / header).items():
            if fid in out:
                out[fid].add(name)
    return out
