"""GPUs whose idle and busy spells are known by construction, as dcgm-exporter series for
`promtool tsdb create-blocks-from openmetrics` (tests of `gpulens enforce` and its bench).

A `Gpu` has a host, an index, a partition label (a site's relabelling adds it to each series
of a node), its holder's labels (`hpc_job` and `user` on Slurm, `pod` and `namespace` on
Kubernetes; none for a free GPU) and a timeline of (minute from, state) changes: "idle" (20 GiB
held, no activity), "train" (duty 95 %, SM 0.7, tensor 0.45, 40 GiB) or "free" (nothing held).
Samples every `scrape_s`, in the middle of each scrape interval.
"""

from __future__ import annotations

import subprocess
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from promdata import PROMTOOL

TOTAL_MIB = 81559.0
#: per state: GPU_UTIL %, SM active, tensor active, FB used MiB, power W
LEVELS = {
    "free": (0.0, 0.0, 0.0, 0.0, 70.0),
    "idle": (0.0, 0.0, 0.0, 20480.0, 90.0),
    "train": (95.0, 0.7, 0.45, 40960.0, 560.0),
}
FAMILIES = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
)


@dataclass(frozen=True)
class Gpu:
    host: str
    index: int
    partition: str
    holder: dict[str, str] = field(default_factory=dict)
    timeline: tuple[tuple[float, str], ...] = ((0.0, "idle"),)

    @property
    def uuid(self) -> str:
        return f"GPU-{zlib.crc32(self.host.encode()):08x}-{self.index:04d}-0000-0000-000000000000"

    def state(self, minute: float) -> str:
        current = self.timeline[0][1]
        for start, state in self.timeline:
            if minute >= start:
                current = state
        return current


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def write_openmetrics(
    gpus: Sequence[Gpu], start_s: int, minutes: float, path: Path, scrape_s: int = 30
) -> int:
    """The GPUs' samples over [start_s, start_s + minutes) as OpenMetrics text; the count."""
    times = [start_s + scrape_s // 2 + i * scrape_s for i in range(int(minutes * 60 // scrape_s))]
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for f_index, family in enumerate(FAMILIES):
            out.write(f"# TYPE {family} gauge\n")
            for gpu in gpus:
                base = (
                    f'gpu="{gpu.index}",UUID="{gpu.uuid}",modelName="NVIDIA H100 80GB HBM3",'
                    f'Hostname="{gpu.host}",partition="{gpu.partition}"'
                )
                lines = []
                for t in times:
                    state = gpu.state((t - start_s) / 60)
                    labels = base
                    if state != "free":
                        labels += "".join(f',{k}="{_escape(v)}"' for k, v in gpu.holder.items())
                    duty, sm, tensor, used, power = LEVELS[state]
                    value = (duty, sm, tensor, used, TOTAL_MIB - used, power)[f_index]
                    lines.append(f"{family}{{{labels}}} {value:g} {t}\n")
                out.writelines(lines)
                count += len(lines)
        out.write("# EOF\n")
    return count


def backfill(gpus: Sequence[Gpu], start_s: int, minutes: float, data_dir: Path, work: Path) -> int:
    """promtool create-blocks-from openmetrics of the GPUs into `data_dir`; the samples."""
    data_dir.mkdir(parents=True, exist_ok=True)
    text = work / "idle-cluster.om"
    written = write_openmetrics(gpus, start_s, minutes, text)
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(text), str(data_dir)],
        check=True,
        capture_output=True,
    )
    text.unlink()
    return written
