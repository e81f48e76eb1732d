"""NvidiaSmiCollector: GPUs, MIG devices and processes through the `nvidia-smi` command.

The fallback for machines where NVML's Python bindings cannot load (some containers): it runs
`nvidia-smi -q -x` (default, `mode="xml"`: GPUs, MIG devices, processes, versions) or
`nvidia-smi --query-gpu=... --format=csv,nounits` (`mode="csv"`: GPUs only, cheaper) and
hands the text to the pure parsers. The command runner is injected, so tests replay captures.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from typing import Literal

from gpulens.collect.nvidia_smi.parse_csv import parse_query_csv, query_command
from gpulens.collect.nvidia_smi.parse_xml import SOURCE_LABEL, parse_nvsmi_xml_document
from gpulens.collect.nvml import parse as nvml_parse
from gpulens.errors import CollectError, GpulensError, SourceUnavailable
from gpulens.model import Reading

Runner = Callable[[list[str]], str]
Mode = Literal["xml", "csv"]

_INSTALL_HINT = (
    "install the NVIDIA driver's utilities (Debian/Ubuntu: `nvidia-utils-<driver version>`; "
    "in a container: run with the NVIDIA Container Toolkit, `--gpus all`), or pass "
    "binary=<path to nvidia-smi>"
)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return "(no output)"


def subprocess_runner(timeout_s: float) -> Runner:
    """A runner that executes argv with `subprocess.run` and returns stdout.

    Missing binary → SourceUnavailable; non-zero exit or timeout → CollectError naming the
    command and the first line it printed.
    """

    def run(argv: list[str]) -> str:
        command = " ".join(argv)
        try:
            done = subprocess.run(  # argv is a list built here: no shell
                argv,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout_s,
                check=False,
            )
        except FileNotFoundError as exc:
            raise SourceUnavailable(f"`{argv[0]}` was not found ({exc}); {_INSTALL_HINT}.") from exc
        except PermissionError as exc:
            raise SourceUnavailable(
                f"`{argv[0]}` cannot be executed ({exc}); check its permissions or {_INSTALL_HINT}."
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise CollectError(
                f"`{command}` did not finish within {timeout_s:g} s; the driver may be hung "
                "(check `dmesg` for XID errors) or raise timeout_s."
            ) from exc
        except OSError as exc:
            raise CollectError(f"`{command}` could not be run: {exc}") from exc
        if done.returncode != 0:
            raise CollectError(
                f"`{command}` exited with status {done.returncode}: "
                f"{_first_line(done.stderr or done.stdout)!r}; check that `nvidia-smi` works "
                "on this host (driver loaded, GPUs visible to this container)."
            )
        return done.stdout

    return run


class NvidiaSmiCollector:
    """A Collector that reads `nvidia-smi` output each tick.

    `runner(argv) -> stdout` runs the command (default: subprocess with `timeout_s`);
    `mode` picks the XML (`-q -x`) or CSV (`--query-gpu`) output. Version events are emitted
    on the first collection and whenever the driver or CUDA version changes (XML mode).
    """

    def __init__(
        self,
        host: str,
        runner: Runner | None = None,
        binary: str = "nvidia-smi",
        name: str = "nvidia_smi",
        timeout_s: float = 5.0,
        *,
        mode: Mode = "xml",
    ) -> None:
        if mode not in ("xml", "csv"):
            raise ValueError(f"mode must be 'xml' or 'csv', got {mode!r}")
        if runner is None:
            if shutil.which(binary) is None:
                raise SourceUnavailable(f"`{binary}` was not found on PATH; {_INSTALL_HINT}.")
            runner = subprocess_runner(timeout_s)
        self.name = name
        self.host = host
        self.mode: Mode = mode
        self._runner = runner
        self._argv = [binary, "-q", "-x"] if mode == "xml" else query_command(binary)
        self._command = " ".join(self._argv)
        self._versions: dict[str, str] | None = None
        self._host_labels = {"host": host, "source": SOURCE_LABEL}
        self._closed = False

    @property
    def command(self) -> list[str]:
        """The argv run each tick."""
        return list(self._argv)

    def collect(self, now_ns: int) -> list[Reading]:
        """Run the command once and parse its output into readings stamped `now_ns`.

        Raises SourceUnavailable (no binary) or CollectError (failed run, unreadable output,
        which names the command and the line); never anything else.
        """
        if self._closed:
            raise CollectError(f"collector {self.name!r} is closed")
        try:
            text = self._runner(list(self._argv))
        except GpulensError:
            raise
        except FileNotFoundError as exc:
            raise SourceUnavailable(
                f"`{self._argv[0]}` was not found ({exc}); {_INSTALL_HINT}."
            ) from exc
        except Exception as exc:
            raise CollectError(f"`{self._command}` failed: {exc!r}") from exc
        try:
            if self.mode == "csv":
                return parse_query_csv(text, self._command, now_ns, self.host)
            doc = parse_nvsmi_xml_document(text, self._command, now_ns, self.host)
        except GpulensError:
            raise
        except Exception as exc:  # a parser bug must not take the scheduler down
            raise CollectError(
                f"unexpected failure parsing `{self._command}` output "
                f"(first line {_first_line(text)!r}): {exc!r}"
            ) from exc
        out = doc.readings
        if doc.versions and doc.versions != self._versions:
            out = out + nvml_parse.version_events(
                now_ns, doc.versions, self._versions, self._host_labels
            )
            self._versions = dict(doc.versions)
        return out

    def close(self) -> None:
        """Nothing is held between runs; later collections raise CollectError."""
        self._closed = True
