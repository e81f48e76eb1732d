"""What the bench scripts that start `gpulens agent` share: a free loopback port, an
environment without GPULENS_* settings, and waiting for the agent to answer."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env() -> dict[str, str]:
    """This process's environment without GPULENS_* settings (the config file decides)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}


def wait_ready(url: str, deadline: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Until `url` answers 200 or `deadline` (time.monotonic()) passes; SystemExit if the agent
    (`proc`, when given) exits first or never answers."""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the agent exited early with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the agent did not answer {url} in time")
