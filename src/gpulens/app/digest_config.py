"""Who gets which report card, and how: the digest's TOML file (`gpulens digest --recipients
FILE`), validated once.

```toml
[smtp]                      # sending by mail
host = "smtp.example.org"
port = 587                  # default 587 with STARTTLS, 25 without
starttls = true
user = "gpulens"            # or GPULENS_SMTP_USER
password_env = "GPULENS_SMTP_PASSWORD"   # the variable holding the password (the default)
password_file = "/etc/gpulens/smtp-password"  # or a file holding it (when the variable is unset)
from = "gpulens@example.org"
ca_file = "/etc/ssl/site-ca.pem"         # optional: a CA to trust for STARTTLS

[webhook]                   # sending to chat: every card, unless a team or user has its own
url = "https://hooks.slack.com/services/..."
format = "slack"            # slack ({"text": ...}) or teams (a MessageCard)

[teams.vision]
members = ["alice", "bob"]  # these users' GPU time counts for the team (over its labels)
email = ["vision-leads@example.org"]
webhook = "https://..."     # the team's channel

[users.alice]
email = "alice@example.org"

[users]                     # or one rule for everyone:
email_domain = "example.org"   # user → user@example.org
```
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulens.errors import ConfigError

WEBHOOK_FORMATS = ("slack", "teams")


@dataclass(frozen=True, slots=True)
class Smtp:
    host: str
    port: int
    starttls: bool
    sender: str
    user: str | None = None
    password: str | None = None
    ca_file: str | None = None  # a CA bundle to verify the server's certificate with


@dataclass(frozen=True, slots=True)
class Webhook:
    url: str
    format: str = "slack"


@dataclass(frozen=True, slots=True)
class Recipient:
    """Where one team's or user's card goes."""

    email: tuple[str, ...] = ()
    webhook: Webhook | None = None


@dataclass(frozen=True, slots=True)
class Recipients:
    smtp: Smtp | None = None
    webhook: Webhook | None = None
    teams: Mapping[str, Recipient] = field(default_factory=dict)
    users: Mapping[str, Recipient] = field(default_factory=dict)
    members: Mapping[str, str] = field(default_factory=dict)  # user → team
    email_domain: str | None = None

    def of(self, kind: str, name: str) -> Recipient:
        """The card's recipient: its own entry, the default webhook, the email domain."""
        own = (self.teams if kind == "team" else self.users).get(name, Recipient())
        email = own.email
        if not email and kind == "user" and self.email_domain:
            email = (f"{name}@{self.email_domain}",)
        return Recipient(email, own.webhook or self.webhook)

    def team_members(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for user, team in self.members.items():
            out.setdefault(team, []).append(user)
        return out


def _bad(path: str, key: str, what: str) -> ConfigError:
    return ConfigError(f"{path}: [{key}] {what}")


def _str(table: Mapping[str, Any], key: str, path: str, where: str) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise _bad(path, where, f"{key} = {value!r} must be a non-empty string")
    return value


def _emails(value: Any, path: str, where: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if value is None:
        return ()
    if not isinstance(items, list) or not all(isinstance(i, str) and "@" in i for i in items):
        raise _bad(path, where, f"email = {value!r}: give an address or a list of addresses")
    return tuple(items)


def _webhook(value: Any, path: str, where: str, fmt: str = "slack") -> Webhook | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = {"url": value, "format": fmt}
    if not isinstance(value, Mapping):
        raise _bad(path, where, f"webhook = {value!r}: give a URL")
    url = _str(value, "url", path, where)
    form = value.get("format", fmt)
    if not url or not url.startswith(("http://", "https://")):
        raise _bad(path, where, f"url = {url!r} must be an http(s) URL")
    if form not in WEBHOOK_FORMATS:
        raise _bad(path, where, f"format = {form!r}: use one of {', '.join(WEBHOOK_FORMATS)}")
    return Webhook(url, str(form))


def _smtp(table: Any, path: str, env: Mapping[str, str]) -> Smtp | None:
    if table is None:
        return None
    if not isinstance(table, Mapping):
        raise _bad(path, "smtp", "must be a table")
    host = _str(table, "host", path, "smtp")
    sender = _str(table, "from", path, "smtp")
    if not host or not sender:
        raise _bad(path, "smtp", "needs host and from")
    starttls = table.get("starttls", True)
    if not isinstance(starttls, bool):
        raise _bad(path, "smtp", f"starttls = {starttls!r} must be true or false")
    port = table.get("port", 587 if starttls else 25)
    if not isinstance(port, int) or not 0 < port < 65536:
        raise _bad(path, "smtp", f"port = {port!r} must be a port number")
    user = env.get("GPULENS_SMTP_USER") or _str(table, "user", path, "smtp")
    secret = _str(table, "password_env", path, "smtp") or "GPULENS_SMTP_PASSWORD"
    password = env.get(secret)
    password_file = _str(table, "password_file", path, "smtp")
    if not password and password_file:
        try:
            password = Path(password_file).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise _bad(
                path, "smtp", f"password_file = {password_file!r}: cannot read it ({exc.strerror})"
            ) from None
    if user and not password:
        raise _bad(
            path,
            "smtp",
            f"user {user!r} is set but ${secret} holds no password (and no password_file)",
        )
    ca_file = _str(table, "ca_file", path, "smtp")
    if ca_file is not None and not Path(ca_file).expanduser().is_file():
        raise _bad(path, "smtp", f"ca_file = {ca_file!r} is not a file")
    return Smtp(host, port, starttls, sender, user, password, ca_file)


def parse_recipients(
    doc: Mapping[str, Any], path: str, env: Mapping[str, str] | None = None
) -> Recipients:
    """The recipients of a decoded TOML document (`env`: the environment, for secrets)."""
    env = os.environ if env is None else env
    known = {"smtp", "webhook", "teams", "users"}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {unknown}: use {sorted(known)}")
    webhook = _webhook(doc.get("webhook"), path, "webhook")
    teams: dict[str, Recipient] = {}
    members: dict[str, str] = {}
    for name, entry in (doc.get("teams") or {}).items():
        where = f"teams.{name}"
        if not isinstance(entry, Mapping):
            raise _bad(path, where, "must be a table")
        users = entry.get("members", [])
        if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
            raise _bad(path, where, f"members = {users!r} must be a list of user names")
        for user in users:
            if members.get(user, name) != name:
                raise _bad(path, where, f"{user!r} is also a member of {members[user]!r}")
            members[user] = name
        teams[name] = Recipient(
            _emails(entry.get("email"), path, where), _webhook(entry.get("webhook"), path, where)
        )
    users_doc = dict(doc.get("users") or {})
    domain = users_doc.pop("email_domain", None)
    if domain is not None and (not isinstance(domain, str) or "@" in domain or not domain):
        raise _bad(path, "users", f"email_domain = {domain!r}: give a domain (example.org)")
    users = {}
    for name, entry in users_doc.items():
        where = f"users.{name}"
        if not isinstance(entry, Mapping):
            raise _bad(path, where, "must be a table")
        users[name] = Recipient(
            _emails(entry.get("email"), path, where), _webhook(entry.get("webhook"), path, where)
        )
    return Recipients(
        smtp=_smtp(doc.get("smtp"), path, env),
        webhook=webhook,
        teams=teams,
        users=users,
        members=members,
        email_domain=domain,
    )


def load_recipients(path: Path | None, env: Mapping[str, str] | None = None) -> Recipients:
    """`parse_recipients` of a TOML file (no file: nobody, nothing to send to)."""
    if path is None:
        return Recipients()
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--recipients {str(path)!r}: cannot read it ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--recipients {str(path)!r}: not valid TOML ({exc})") from None
    return parse_recipients(doc, str(path), env)
