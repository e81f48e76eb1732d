"""A webhook receiver for Alertmanager on a local address: each POST is parsed
(`webhook.parse_webhook`) and handed to a callback; a body that does not parse gets HTTP 400
with the reason, so Alertmanager's log says what went wrong."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gpulens.collect.alertmanager.webhook import WebhookError, WebhookMessage, parse_webhook

#: Alertmanager bodies are small; a larger one is refused rather than read
MAX_BODY_BYTES = 4 * 2**20


class WebhookReceiver:
    """Serves `host:port` (port 0: any free one); `on_message(message)` runs for each
    notification, one at a time. `serve_forever()` blocks; `start()` serves from a thread;
    `close()` stops."""

    def __init__(self, host: str, port: int, on_message: Callable[[WebhookMessage], None]) -> None:
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    self._reply(400, "Content-Length is not a number of bytes")
                    return
                if length < 0 or length > MAX_BODY_BYTES:
                    self._reply(413, f"body of {length} bytes is not within 0-{MAX_BODY_BYTES}")
                    return
                body = self.rfile.read(length)
                try:
                    message = parse_webhook(body, f"POST {self.path}")
                except WebhookError as exc:
                    self._reply(400, str(exc))
                    return
                try:
                    with lock:
                        on_message(message)
                except Exception as exc:  # e.g. the output file cannot be written: say so
                    self._reply(500, f"{type(exc).__name__}: {exc}")
                    return
                self._reply(200, "ok")

            def _reply(self, code: int, text: str) -> None:
                data = (text + "\n").encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return  # the callback reports what arrived

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def serve_forever(self) -> None:
        self.server.serve_forever(poll_interval=0.2)

    def start(self) -> None:
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self.thread is not None:
            self.thread.join(5)
