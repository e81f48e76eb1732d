"""Profiling a tracked training loop on demand: a request file in the data dir, or SIGUSR2.

**Asking.** `gpulens profile --job ID [--steps N]` (or an automatic request of a finding) writes
`<data_dir>/profile-requests/<job>.json`: `{"id", "job_id", "steps", "finding", "expires_ns"}`.
The tracker's writer thread looks at that file on every wake (each `interval_s`, one `stat`);
a request it has not served yet and that has not expired arms a capture. A process can also be
asked with `kill -USR2 <pid>`: `track()` installs a SIGUSR2 handler when it runs on the main
thread and no other handler is set (Python delivers signals to the main thread only; the
handler only sets a flag), capturing the `profile.steps` setting's number of steps.

**Capturing.** At the next `step()` the training thread starts `torch.profiler.profile` with
the schedule wait 1, warm-up 1, active N steps (CPU activity, and CUDA on a GPU), calls its
`step()` at every step end, and when the N active steps are recorded writes the Kineto trace to
`<data_dir>/profiles/<job>/<request id>/<host>-<pid>.pt.trace.json` with a metadata file beside
it (`.json`: the request, the finding that asked, the tracker's step numbers of the active
steps, run, rank) and an `event` row `profile_captured`. Each process of the job (each rank)
serves the request once. `gpulens profile` (app/profiles.py) analyses the trace and links it.

Only a data dir on a local file system is polled; with an object-store data dir, SIGUSR2 asks
and the trace is written under the system's temporary directory.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("gpulens.torch")

REQUESTS_DIR = "profile-requests"
PROFILES_DIR = "profiles"
WAIT_STEPS = 1
WARMUP_STEPS = 1
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(job: str) -> str:
    """`job` as one file-name component (other characters as `_`)."""
    return _SAFE.sub("_", job) or "_"


class OnDemand:
    """The profiling side of one tracked run (see the module's docstring)."""

    def __init__(
        self,
        data_dir: Any,
        job: str,
        run_id: str,
        labels: dict[str, str],
        cuda: bool,
        default_steps: int,
        on_event: Callable[[str, str], None],
    ) -> None:
        self.local = Path(data_dir) if isinstance(data_dir, Path) else None
        self.job = job
        self.run_id = run_id
        self.labels = labels
        self.cuda = cuda
        self.default_steps = default_steps
        self._on_event = on_event
        self._request_file = (
            self.local / REQUESTS_DIR / f"{safe_name(job)}.json" if self.local else None
        )
        self._seen_mtime: int | None = None
        self._served: set[str] = set()
        self.armed: dict[str, Any] | None = None  # set by the writer thread or the signal
        self._profiler: Any = None
        self._request: dict[str, Any] | None = None
        self._first_step = 0
        self._steps_left = 0
        self.captures: list[Path] = []  # metadata files written

    @property
    def busy(self) -> bool:
        """True while a capture is armed or running (the training thread checks this)."""
        return self.armed is not None or self._profiler is not None

    # -- asking (writer thread, signal handler) --------------------------------------------

    def poll(self, now_ns: int | None = None) -> None:
        """Arm a capture for a new, unexpired request in the request file."""
        path = self._request_file
        if path is None or self.busy:
            return
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return
        if mtime == self._seen_mtime:
            return
        self._seen_mtime = mtime
        try:
            request = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("gpulens: ignoring the unreadable profile request %s: %s", path, exc)
            return
        rid = str(request.get("id") or "")
        expires = request.get("expires_ns")
        now = time.time_ns() if now_ns is None else now_ns
        if not rid or rid in self._served or (isinstance(expires, int) and expires < now):
            return
        self._served.add(rid)
        steps = request.get("steps")
        request["steps"] = steps if isinstance(steps, int) and steps > 0 else self.default_steps
        self.armed = request

    def install_signal(self) -> bool:
        """Install the SIGUSR2 handler (main thread, no handler there yet): True if done."""
        sig = getattr(signal, "SIGUSR2", None)
        if sig is None or threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(sig) not in (signal.SIG_DFL, None):
            return False
        signal.signal(sig, self._on_signal)
        return True

    def _on_signal(self, signum: int, frame: Any) -> None:
        if not self.busy:
            rid = f"signal-{time.time_ns()}"
            self._served.add(rid)
            self.armed = {"id": rid, "job_id": self.job, "steps": self.default_steps}

    # -- capturing (training thread) --------------------------------------------------------

    def step_ended(self, step: int) -> None:
        """Called by `Run.step()` after step number `step` while `busy`."""
        if self._profiler is None:
            request, self.armed = self.armed, None
            if request is not None:
                self._start(request, step)
            return
        self._profiler.step()
        if step > self._first_step + WAIT_STEPS + WARMUP_STEPS:  # an active step ended
            self._steps_left -= 1
        if self._steps_left <= 0 and self._profiler is not None:
            self._finish(step)

    def _start(self, request: dict[str, Any], step: int) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        steps = int(request["steps"])
        self._request = request
        self._first_step = step
        self._steps_left = steps
        self._trace: Path | None = None
        self._profiler = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(
                wait=WAIT_STEPS, warmup=WARMUP_STEPS, active=steps, repeat=1
            ),
            on_trace_ready=self._ready,
        )
        self._profiler.start()

    def _folder(self, request: dict[str, Any]) -> Path:
        base = self.local or Path(tempfile.gettempdir()) / "gpulens"
        folder = base / PROFILES_DIR / safe_name(self.job) / safe_name(str(request["id"]))
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _ready(self, prof: Any) -> None:
        assert self._request is not None
        name = f"{safe_name(self.labels.get('host') or socket.gethostname())}-{os.getpid()}"
        path = self._folder(self._request) / f"{name}.pt.trace.json"
        prof.export_chrome_trace(str(path))
        self._trace = path

    def _finish(self, step: int) -> None:
        prof, self._profiler = self._profiler, None
        request, self._request = self._request, None
        try:
            prof.stop()
        except Exception:  # already stopped by its schedule
            log.debug("gpulens: stopping the profiler", exc_info=True)
        if request is None or self._trace is None:
            return
        first = step - int(request["steps"]) + 1
        meta = {
            "request_id": request["id"],
            "job_id": self.job,
            "run_id": self.run_id,
            "host": self.labels.get("host"),
            "pid": os.getpid(),
            "rank": self.labels.get("rank"),
            "first_step": first,
            "last_step": step,
            "steps": int(request["steps"]),
            "trace": self._trace.name,
            "finding": request.get("finding"),
            "captured_ns": time.time_ns(),
        }
        path = self._trace.with_name(self._trace.name.removesuffix(".pt.trace.json") + ".json")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(meta, indent=1), encoding="utf-8")
        tmp.replace(path)
        self.captures.append(path)
        self._on_event(
            "profile_captured",
            f"profiled steps {first}-{step} ({request['id']}): {self._trace}",
        )

    def abandon(self) -> None:
        """Stop a capture still running (the run ends first; its trace is not written) and
        remove the SIGUSR2 handler this run installed."""
        prof, self._profiler = self._profiler, None
        self.armed = None
        sig = getattr(signal, "SIGUSR2", None)
        main = threading.current_thread() is threading.main_thread()
        if sig is not None and main and signal.getsignal(sig) == self._on_signal:
            signal.signal(sig, signal.SIG_DFL)
        if prof is not None:
            try:
                prof.stop()
            except Exception:
                log.debug("gpulens: stopping the profiler", exc_info=True)
