"""`gpulens alerts`: gpulens's own receiver for Alertmanager's webhook (registered on the app
by cli.py). `receive` serves the webhook on a local address and prints (and appends to a
JSON-lines file) each alert with the job, user, GPU and node it is about; `parse` reads saved
webhook bodies the same way. The parsing is collect/alertmanager's."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from gpulens.errors import StoreError
from gpulens.present.console import UsageApp, app, err

alerts_app = UsageApp(
    no_args_is_help=True, help="Receive Alertmanager's notifications of gpulens alerts."
)
app.add_typer(alerts_app, name="alerts")


class AlertFormat(StrEnum):
    terminal = "terminal"
    json = "json"


def alert_line(alert: dict[str, Any]) -> str:
    """One line a person reads: status, name, job, user, GPU, node, summary."""
    who = [
        f"{name} {alert[key]}"
        for name, key in (("job", "job"), ("user", "user"), ("pod", "pod"))
        if alert.get(key)
    ]
    where = f"GPU {alert.get('gpu') or '?'} on {alert.get('node') or '?'}"
    summary = f": {alert['summary']}" if alert.get("summary") else ""
    holder = ", ".join(who) or "no holder"
    return f"{alert['status'].upper()} {alert['alertname']} ({holder}; {where}){summary}"


def _emit(rows: list[dict[str, Any]], format: AlertFormat, sink: IO[str] | None) -> None:
    for row in rows:
        text = json.dumps(row, ensure_ascii=False, sort_keys=True)
        if sink is not None:
            sink.write(text + "\n")
            sink.flush()
        sys.stdout.write((text if format is AlertFormat.json else alert_line(row)) + "\n")
    sys.stdout.flush()


def _listen(text: str) -> tuple[str, int]:
    from gpulens.errors import ConfigError

    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--listen {text!r}: expected HOST:PORT, such as 127.0.0.1:9099")
    return host.strip("[]") or "127.0.0.1", int(port)


@alerts_app.command()
def receive(
    listen: Annotated[
        str, typer.Option(help="Address to serve Alertmanager's webhook on (HOST:PORT).")
    ] = "127.0.0.1:9099",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Append each alert as a JSON line here.")
    ] = None,
    format: Annotated[AlertFormat, typer.Option(help="What to print per alert.")] = (
        AlertFormat.terminal
    ),
) -> None:
    """Serve the webhook for Alertmanager (`webhook_configs: - url: http://HOST:PORT/`) and
    print each alert: status, name, job, user, GPU and node."""
    from gpulens.collect.alertmanager import WebhookMessage, WebhookReceiver, gpu_alert

    host, port = _listen(listen)
    try:
        sink = output.open("a", encoding="utf-8") if output is not None else None
    except OSError as exc:
        raise StoreError(
            f"cannot append to {str(output)!r} ({exc.strerror}): choose another --output file"
        ) from None

    def on_message(message: WebhookMessage) -> None:
        _emit([gpu_alert(a) for a in message.alerts], format, sink)

    try:
        receiver = WebhookReceiver(host, port, on_message)
    except OSError as exc:
        from gpulens.errors import ConfigError

        raise ConfigError(f"--listen {listen!r}: cannot serve there ({exc.strerror})") from None
    bound = receiver.address
    err.print(f"receiving Alertmanager webhooks on http://{bound[0]}:{bound[1]}/")
    try:
        receiver.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        receiver.server.server_close()
        if sink is not None:
            sink.close()


@alerts_app.command()
def parse(
    files: Annotated[list[Path], typer.Argument(help="Saved webhook bodies (JSON).")],
    format: Annotated[AlertFormat, typer.Option(help="What to print per alert.")] = (
        AlertFormat.terminal
    ),
) -> None:
    """Print the alerts of saved Alertmanager webhook bodies, as `receive` does."""
    from gpulens.collect.alertmanager import gpu_alert, parse_webhook
    from gpulens.errors import CollectError

    for path in files:
        try:
            body = path.read_bytes()
        except OSError as exc:
            raise CollectError(f"cannot read {path}: {exc.strerror}") from None
        _emit([gpu_alert(a) for a in parse_webhook(body, str(path)).alerts], format, None)
