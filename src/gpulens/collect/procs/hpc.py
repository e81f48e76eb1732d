"""dcgm-exporter's `--hpc-job-mapping-dir` format: which batch jobs hold which GPU.

A site's job prolog writes one file per GPU, named by GPU index (`0`, `1`, ...) or by GPU and
GPU-instance index for MIG (`0.1`, `0.2`), each listing the job ids on that GPU one per line;
the epilog empties or removes it. gpulens reads the same directory, so a site that already
feeds dcgm-exporter needs nothing new.
"""

from __future__ import annotations

from pathlib import Path

from gpulens.errors import ConfigError


def parse_job_file(text: str) -> list[str]:
    """Job ids, one per line; blank lines and `#` comments ignored, order kept, no duplicates."""
    jobs: list[str] = []
    for line in text.splitlines():
        job = line.split("#", 1)[0].strip()
        if job and job not in jobs:
            jobs.append(job)
    return jobs


class HpcJobMapping:
    """Reads the mapping directory on demand (files change as jobs start and end).

    `errors` counts files that could not be read. A directory that does not exist yet is no
    error (no jobs have started); a path that exists and is not a directory is a ConfigError.
    """

    def __init__(self, directory: Path) -> None:
        if directory.exists() and not directory.is_dir():
            raise ConfigError(
                f"hpc_job_mapping_dir {str(directory)!r} is not a directory; expected the folder "
                "of per-GPU job files that dcgm-exporter's --hpc-job-mapping-dir reads: point "
                "it at that folder or leave it unset"
            )
        self.directory = directory
        self.errors = 0

    def _read(self, name: str) -> list[str] | None:
        try:
            return parse_job_file((self.directory / name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError):
            self.errors += 1
            return None

    def jobs_for_gpu(self, gpu_index: str) -> list[str]:
        """Job ids on GPU `gpu_index` ("0"), or on one MIG instance ("0.1").

        For a whole GPU the jobs of its MIG instance files (`0.*`) are included, so a job on
        any slice of GPU 0 is reported for GPU 0. [] when none or the directory is missing.
        """
        jobs = list(self._read(gpu_index) or ())
        if "." not in gpu_index:
            for name in self._names():
                if name.startswith(f"{gpu_index}."):
                    jobs.extend(j for j in self._read(name) or () if j not in jobs)
        return jobs

    def _names(self) -> list[str]:
        try:
            return sorted(p.name for p in self.directory.iterdir() if p.is_file())
        except FileNotFoundError:
            return []
        except OSError:
            self.errors += 1
            return []

    def all_jobs(self) -> dict[str, list[str]]:
        """File name (GPU or GPU.instance index) → job ids, for every non-empty file."""
        out = {}
        for name in self._names():
            jobs = self._read(name)
            if jobs:
                out[name] = jobs
        return out
