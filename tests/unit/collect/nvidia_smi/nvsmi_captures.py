"""Locate the real nvidia-smi captures in ../shared and cut sections out of them (tests only)."""

from __future__ import annotations

import re
from pathlib import Path

XML_DIR = Path("data/telemetry/influxdata_telegraf/plugins/inputs/nvidia_smi/testdata")
CAPTURE_DIR = Path("data/telemetry/utkuozdemir_nvidia_gpu_exporter/internal/captures")

XML_FILES = (
    "a100-sxm4-v12.xml",
    "a10g.xml",
    "tesla-t4.xml",
    "rtx-3080-v13.xml",
    "rtx-4000-sff-ada-v13.xml",
)
CAPTURES = {
    "h100": "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt",
    "h100-mig": "linux-x86_64__nvidia-h100-mig__590.48.01.txt",
    "h200": "linux-x86_64__nvidia-h200__590.48.01.txt",
    "h200-mig": "linux-x86_64__nvidia-h200-mig__590.48.01.txt",
    "l40s": "linux-x86_64__nvidia-l40s__595.80.txt",
    "rtx4080s": "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt",
    "rtx2080s": "linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt",
}

_RULE = "#" * 80


def sections(text: str) -> dict[str, str]:
    """Capture file → {section title ("load :: query-gpu (csv, ...)"): body}.

    A section is a banner (a rule line, `# <title>`, `# $ <command>`..., a rule line) followed
    by the command's output up to the next banner.
    """
    out: dict[str, str] = {}
    parts = re.split(rf"^{_RULE}\n", text, flags=re.MULTILINE)
    # parts: [preamble, banner, body, banner, body, ...]
    for banner, body in zip(parts[1::2], parts[2::2], strict=False):
        title = banner.splitlines()[0].removeprefix("# ").strip()
        out[title] = body
    return out


def query_gpu_csv(text: str, state: str) -> str:
    """The `--query-gpu ... --format=csv` output of `state` ("idle" or "load")."""
    return sections(text)[f"{state} :: query-gpu (csv, what the exporter parses)"]
