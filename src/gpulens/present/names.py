"""Unambiguous GPU names for every table: `host/index`, a short UUID suffix when an index
repeats on a host (`vm/0 ·8ea`), and a MIG instance under its parent as
`host/index MIG 3g.20gb #1` (profile and GPU instance id; `MIG #1` when the profile is
unknown).

Rows are mappings with any of `host`, `gpu_index`, `gpu_uuid`, `mig_instance`, `mig_profile`
and `parent_uuid`; `gpu_names` names them all at once (uniqueness needs the whole list) and
`gpu_order` sorts them so that each instance follows its parent.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

Row = Mapping[str, Any]


def _text(row: Row, key: str) -> str | None:
    value = row.get(key)
    return None if value in (None, "") else str(value)


def is_mig(row: Row) -> bool:
    """A MIG instance: it has a GPU instance id or a parent."""
    return _text(row, "mig_instance") is not None or _text(row, "parent_uuid") is not None


def _hex(uuid: str) -> str:
    return "".join(c for c in uuid.lower() if c in "0123456789abcdef")


def _whole_names(gpus: dict[str, tuple[str, str]]) -> dict[str, str]:
    """uuid → name of the whole GPUs (uuid → (host, index)); a suffix of the UUID, long enough
    to tell them apart, where an index repeats on a host."""
    by_slot: dict[tuple[str, str], list[str]] = defaultdict(list)
    for uuid, slot in gpus.items():
        by_slot[slot].append(uuid)
    names: dict[str, str] = {}
    for (host, index), uuids in by_slot.items():
        base = f"{host}/{index}"
        if len(uuids) == 1:
            names[uuids[0]] = base
            continue
        width = 3
        while width < 32 and len({_hex(u)[-width:] for u in uuids}) < len(uuids):
            width += 1
        for u in uuids:
            names[u] = f"{base} ·{_hex(u)[-width:] or u}"
    return names


def gpu_names(rows: Sequence[Row]) -> list[str]:
    """One name per row, unambiguous across `rows` (see the module doc)."""
    whole: dict[str, tuple[str, str]] = {}
    for r in rows:
        uuid = _text(r, "gpu_uuid") or "?"
        if not is_mig(r):
            index = _text(r, "gpu_index") or uuid[:12]
            whole.setdefault(uuid, (_text(r, "host") or "-", index))
    for r in rows:  # an instance whose parent has no row of its own: name the parent too
        parent = _text(r, "parent_uuid")
        if is_mig(r) and parent is not None and parent not in whole:
            whole[parent] = (_text(r, "host") or "-", _text(r, "gpu_index") or parent[:12])
    names = _whole_names(whole)
    out = []
    for r in rows:
        uuid = _text(r, "gpu_uuid") or "?"
        if not is_mig(r):
            out.append(names[uuid])
            continue
        parent = _text(r, "parent_uuid")
        host = _text(r, "host") or "-"
        above = names[parent] if parent is not None else f"{host}/{_text(r, 'gpu_index') or '?'}"
        profile = _text(r, "mig_profile")
        instance = _text(r, "mig_instance") or uuid[-6:]
        out.append(f"{above} MIG {profile + ' ' if profile else ''}#{instance}")
    return out


def _number(text: str | None) -> tuple[int, str]:
    text = text or ""
    return (int(text) if text.isdigit() else 1 << 30, text)


def gpu_order(row: Row) -> tuple[str, tuple[int, str], str, int, tuple[int, str]]:
    """Sort key: host, index, the parent's UUID, then the parent before its instances, in
    instance order."""
    mig = is_mig(row)
    family = _text(row, "parent_uuid") if mig else _text(row, "gpu_uuid")
    return (
        _text(row, "host") or "",
        _number(_text(row, "gpu_index")),
        family or "",
        int(mig),
        _number(_text(row, "mig_instance")),
    )
