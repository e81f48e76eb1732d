"""A misbehaving HTTP endpoint on loopback, for the tests of sources under faults.

GET /ok serves `page`; /huge streams exposition lines without end (or up to `huge_bytes`);
/slow sends one line every `slow_every_s` and never ends; /hang accepts and never answers;
/garbage answers 200 with 5,000 random bytes; /error answers 500; /big declares a
Content-Length of 1 GB and sends nothing. `hits[path]` counts the requests per path.
"""

from __future__ import annotations

import random
import socket
import subprocess
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

LINE = b'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-f00",Hostname="dcgm-node"} 50\n'


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: FaultServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        mode = self.path.strip("/")
        self.server.hits[mode] += 1
        if mode == "hang":
            self.server.closing.wait()
            return
        if mode == "error":
            self.send_error(500)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        body = {"garbage": random.Random(0).randbytes(5000), "ok": self.server.page.encode()}
        if mode in body:
            self.send_header("Content-Length", str(len(body[mode])))
            self.end_headers()
            self.wfile.write(body[mode])
            return
        if mode == "big":
            self.send_header("Content-Length", str(1 << 30))
        self.end_headers()
        try:
            if mode == "huge":
                chunk = LINE * (256 * 1024 // len(LINE))
                sent = 0
                while not self.server.closing.is_set() and sent < self.server.huge_bytes:
                    self.wfile.write(chunk)
                    sent += len(chunk)
            elif mode == "slow":
                while not self.server.closing.wait(self.server.slow_every_s):
                    self.wfile.write(LINE)
                    self.wfile.flush()
            elif mode == "big":
                self.server.closing.wait()
        except OSError:
            return  # the client went away


class FaultServer(ThreadingHTTPServer):
    """The server, in a daemon thread; use as a context manager (it stops every handler)."""

    daemon_threads = True

    def __init__(
        self, page: str = "", huge_bytes: int = 1 << 40, slow_every_s: float = 1.0
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.page = page
        self.huge_bytes = huge_bytes
        self.slow_every_s = slow_every_s
        self.hits: Counter[str] = Counter()
        self.closing = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{mode}"

    def __enter__(self) -> FaultServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dead_url() -> str:
    """A loopback URL nothing listens on (a port just released)."""
    return f"http://127.0.0.1:{free_port()}/metrics"


def wait_healthy(proc: subprocess.Popen[str], url: str, seconds: float = 60.0) -> None:
    """Until the agent at `url` answers `/healthz`; fails the test if `proc` exits first or
    `seconds` pass."""
    deadline = time.monotonic() + seconds
    while True:
        assert proc.poll() is None, proc.communicate()
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the agent did not come up"
        time.sleep(0.2)
