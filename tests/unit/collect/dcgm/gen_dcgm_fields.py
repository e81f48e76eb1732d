"""Print the `FIELD_IDS` literal of `gpulens.collect.dcgm.fields` from NVIDIA's headers.

Run from the repository root: `.venv/bin/python tests/unit/collect/dcgm/gen_dcgm_fields.py`
(honours GPULENS_SHARED). Paste the output over the table in fields.py; test_dcgm_fields.py
fails when the committed table and the headers disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from dcgm_headers import names_by_id

from conftest import shared_dir
from gpulens import catalog
from gpulens.collect.dcgm.fields import LABEL_FIELD_IDS


def main() -> None:
    ids = set(catalog.BY_DCGM_ID) | set(LABEL_FIELD_IDS)
    table = names_by_id(shared_dir(), ids)
    lines = ["FIELD_IDS: Mapping[str, int] = MappingProxyType(", "    {"]
    for fid in sorted(table):
        for name in sorted(table[fid]):
            lines.append(f'        "{name}": {fid},')
    lines += ["    }", ")"]
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
