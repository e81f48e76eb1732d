"""`gpulens digest` on a store whose cards are known by construction (digest_history.py):
figures, baselines and the fleet comparison; the dry run's files; a real SMTP server
(aiosmtpd) and a real HTTP server on loopback receiving the cards."""

from __future__ import annotations

import email
import json
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import digest_history as h

from promdata import PROMETHEUS, PROMTOOL, Prometheus, free_port

UNTIL = "2026-11-21T06:00:00Z"  # the graded day: 2026-11-20, the last of the history


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("digest")
    h.write_store(home / "store")
    (home / "gpulens.toml").write_text(
        f'data_dir = "{home / "store"}"\n[cost]\ngpu_hour_prices = ["H100={h.PRICE}"]\n',
        encoding="utf-8",
    )
    return home


def _run(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    base["COLUMNS"] = "400"
    return subprocess.run(
        [sys.executable, "-m", "gpulens", "digest", "--period", "day", "--until", UNTIL,
         "--config", str(home / "gpulens.toml"), *args],
        capture_output=True, text=True, env={**base, **(env or {})}, timeout=300,
    )  # fmt: skip


def _idle(user: str, day: int) -> float:
    return float(h.HOURS[user][day][1])


def _train(user: str, day: int) -> float:
    return float(h.HOURS[user][day][0])


def test_cards_match_the_history(store: Path) -> None:
    proc = _run(store, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    _check_cards(json.loads(proc.stdout)["cards"])


@pytest.mark.slow
@pytest.mark.skipif(
    not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()) and not os.environ.get("CI"),
    reason="needs Prometheus and promtool (Debian package `prometheus`; .ci/run installs it)",
)
def test_cards_from_a_prometheus_history(tmp_path: Path) -> None:
    """The same five days as dcgm-exporter series backfilled into Debian's Prometheus; teams
    from the `namespace` label: the same cards."""
    text = tmp_path / "history.om"
    h.write_openmetrics(text)
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(text), str(tmp_path / "tsdb")],
        check=True,
        capture_output=True,
    )
    (tmp_path / "gpulens.toml").write_text(  # an empty store: only Prometheus has the data
        f'data_dir = "{tmp_path / "empty"}"\n[cost]\ngpu_hour_prices = ["H100={h.PRICE}"]\n',
        encoding="utf-8",
    )
    with Prometheus(tmp_path, tmp_path / "tsdb") as server:
        proc = _run(tmp_path, "--format", "json", "--prometheus", server.url)
    assert proc.returncode == 0, proc.stderr
    _check_cards(json.loads(proc.stdout)["cards"])


def _check_cards(found: list[dict[str, Any]]) -> None:
    cards = {(c["kind"], c["name"]): c for c in found}
    users = list(h.HOURS)
    assert set(cards) == {("fleet", "fleet"), ("team", "vision"), ("team", "nlp")} | {
        ("user", u) for u in users
    }
    fleet = cards[("fleet", "fleet")]
    fleet_train = sum(_train(u, -1) for u in users)
    for user in users:
        card = cards[("user", user)]
        now, base = card["current"], card["baseline"]
        assert now["allocated_gpu_hours"] == pytest.approx(24.0)
        assert now["idle_allocated_gpu_hours"] == pytest.approx(_idle(user, -1))
        assert now["idle_allocated_cost"] == pytest.approx(_idle(user, -1) * h.PRICE)
        # the baseline: the mean per day of the four days before
        assert card["baseline_periods"] == 4
        mean_idle = sum(_idle(user, d) for d in range(4)) / 4
        assert base["idle_allocated_gpu_hours"] == pytest.approx(mean_idle)
        assert base["idle_allocated_cost"] == pytest.approx(mean_idle * h.PRICE)
        # useful work is proportional to training time: the shares compare as the hours do
        mean_train = sum(_train(user, d) for d in range(4)) / 4
        assert now["useful_share"] / base["useful_share"] == pytest.approx(
            _train(user, -1) / mean_train
        )
        assert now["useful_share"] / fleet["current"]["useful_share"] == pytest.approx(
            (_train(user, -1) / 24) / (fleet_train / (24 * len(users)))
        )
        assert card["fleet"] == fleet["current"]
    vision = cards[("team", "vision")]
    assert vision["members"] == ["alice", "bob"]
    assert vision["current"]["idle_allocated_gpu_hours"] == pytest.approx(
        _idle("alice", -1) + _idle("bob", -1)
    )
    assert vision["baseline"]["allocated_gpu_hours"] == pytest.approx(48.0)
    # alice idled 12 h on the graded day: the top finding of her card and her team's, with a fix
    for key in (("user", "alice"), ("team", "vision")):
        top = cards[key]["findings"][0]
        assert top["rule_id"] == "idle_allocated"
        assert top["wasted_gpu_hours"] == pytest.approx(_idle("alice", -1))
        assert top["recommendation"]
    assert not cards[("user", "bob")]["findings"]
    verdicts = " ".join(cards[("team", "nlp")]["verdicts"])
    assert "up 19 points on its baseline" in verdicts  # carol: 24 h of training after 14 h
    assert "level with its baseline" in " ".join(cards[("user", "bob")]["verdicts"])


def test_dry_run_writes_markdown_and_html(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "cards"
    proc = _run(store, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "nothing sent" in proc.stderr
    names = sorted(p.name for p in out.iterdir())
    for stem in ("fleet", "team-vision", "team-nlp", "user-alice", "user-bob", "user-carol"):
        assert f"{stem}.md" in names and f"{stem}.html" in names
    text = (out / "user-alice.md").read_text()
    assert "# GPU report card: User alice, day of 2026-11-20" in text
    assert f"{_idle('alice', -1) * h.PRICE:.2f} USD" in text
    page = (out / "team-vision.html").read_text()
    assert page.startswith("<!doctype html>") and "idle_allocated" in page
    assert "| user | alice |" in (out / "index.md").read_text()


def _recipients(path: Path, body: str) -> Path:
    path.write_text(body, encoding="utf-8")
    return path


def _certificate(home: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl), and its key."""
    cert, key = home / "cert.pem", home / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_mail_by_smtp_with_starttls_and_login(store: Path, tmp_path: Path) -> None:
    """The server requires STARTTLS before anything and a login over TLS; the client trusts
    its certificate through smtp.ca_file."""
    aiosmtpd = pytest.importorskip("aiosmtpd.controller")
    from aiosmtpd.smtp import AuthResult, LoginPassword

    received: list[tuple[str, list[str], bytes]] = []
    logins: list[bool] = []

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
            assert session.ssl is not None  # the mail itself went over TLS
            received.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
            return "250 OK"

    def auth(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
            b"gpulens",
            b"s3cret",
        )
        logins.append(ok)
        return AuthResult(success=ok)

    cert, key = _certificate(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    port = free_port()
    controller = aiosmtpd.Controller(
        Handler(), hostname="127.0.0.1", port=port, authenticator=auth, tls_context=tls,
        require_starttls=True,
    )  # fmt: skip
    controller.start()
    try:
        who = _recipients(
            tmp_path / "to.toml",
            f"""
[smtp]
host = "127.0.0.1"
port = {port}
starttls = true
user = "gpulens"
from = "gpulens@example.org"
ca_file = "{cert}"

[teams.vision]
email = ["vision-leads@example.org"]

[users]
email_domain = "example.org"
""",
        )
        proc = _run(store, "--send", "--recipients", str(who),
                    env={"GPULENS_SMTP_PASSWORD": "s3cret"})  # fmt: skip
    finally:
        controller.stop()
    assert proc.returncode == 0, proc.stderr
    assert logins == [True]  # one connection, one login, for every card
    assert "no recipient for 1 card(s): team nlp" in proc.stderr
    by_to = {tuple(to): email.message_from_bytes(content) for _f, to, content in received}
    assert set(by_to) == {
        ("vision-leads@example.org",),
        ("alice@example.org",),
        ("bob@example.org",),
        ("carol@example.org",),
    }
    mail: Message = by_to[("alice@example.org",)]
    assert mail["From"] == "gpulens@example.org"
    assert mail["Subject"] == "GPU report card: User alice, day of 2026-11-20"
    assert mail.get_content_type() == "multipart/alternative"
    parts = {p.get_content_type(): p.get_payload(decode=True).decode() for p in mail.walk()
             if not p.is_multipart()}  # fmt: skip
    assert set(parts) == {"text/plain", "text/html"}
    cost = f"{_idle('alice', -1) * h.PRICE:.2f} USD"
    assert cost in parts["text/plain"] and cost in parts["text/html"]
    assert "Fix: " in parts["text/plain"]


def test_wrong_smtp_password_is_reported_per_card(store: Path, tmp_path: Path) -> None:
    who = _recipients(
        tmp_path / "to.toml",
        '[smtp]\nhost = "127.0.0.1"\nport = 9\nstarttls = false\nfrom = "g@example.org"\n'
        '[users]\nemail_domain = "example.org"\n',
    )
    proc = _run(store, "--send", "--recipients", str(who))
    assert proc.returncode == 1
    assert proc.stderr.count("not sent") == 3  # port 9 refuses: every user card says so


class _Hook(BaseHTTPRequestHandler):
    bodies: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        _Hook.bodies.append((self.path, json.loads(self.rfile.read(length))))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Hook.bodies = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_webhooks_slack_and_teams(store: Path, tmp_path: Path, hook: str) -> None:
    who = _recipients(
        tmp_path / "to.toml",
        f"""
[webhook]
url = "{hook}/slack"
format = "slack"

[teams.nlp]
webhook = {{ url = "{hook}/teams-nlp", format = "teams" }}
""",
    )
    proc = _run(store, "--send", "--recipients", str(who))
    assert proc.returncode == 0, proc.stderr
    paths = sorted(p for p, _ in _Hook.bodies)
    # every team and user card: nlp to its own channel, the others to the default one
    assert paths == ["/slack"] * 4 + ["/teams-nlp"]
    teams = next(b for p, b in _Hook.bodies if p == "/teams-nlp")
    assert teams["@type"] == "MessageCard"
    assert teams["title"] == "GPU report card: Team nlp, day of 2026-11-20"
    assert "Useful work" in teams["text"]
    slack = [b for p, b in _Hook.bodies if p == "/slack"]
    alice = next(b for b in slack if "User alice" in b["text"])
    assert f"{_idle('alice', -1) * h.PRICE:.2f} USD" in alice["text"]
    # chat renders no Markdown table: the figures come as a fixed-width block
    assert "```" in alice["text"] and "|---|" not in alice["text"]
    assert "Fix: " in alice["text"]


def test_bad_recipients_file_is_one_clear_error(store: Path, tmp_path: Path) -> None:
    who = _recipients(tmp_path / "to.toml", '[webhook]\nurl = "ftp://x"\n')
    proc = _run(store, "--send", "--recipients", str(who))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "[webhook] url = 'ftp://x' must be an http(s) URL" in lines[0]


def test_a_day_without_readings_is_one_clear_error(store: Path) -> None:
    proc = _run(store, "--until", "2027-01-10T00:00:00Z")
    assert proc.returncode != 0
    assert "no GPU readings" in proc.stderr
