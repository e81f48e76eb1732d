"""The digest's recipients file: who gets which card, and one clear error for each bad entry."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gpulens.app.digest_config import load_recipients, parse_recipients
from gpulens.errors import ConfigError

GOOD = """
[smtp]
host = "smtp.example.org"
user = "gpulens"
from = "gpulens@example.org"

[webhook]
url = "https://hooks.example.org/all"

[teams.vision]
members = ["alice", "bob"]
email = "vision@example.org"
webhook = { url = "https://hooks.example.org/vision", format = "teams" }

[users]
email_domain = "example.org"

[users.carol]
email = ["carol.doe@example.org"]
"""


def test_recipients_and_their_defaults() -> None:
    who = parse_recipients(tomllib.loads(GOOD), "d.toml", env={"GPULENS_SMTP_PASSWORD": "pw"})
    assert who.smtp is not None
    assert (who.smtp.port, who.smtp.starttls, who.smtp.password) == (587, True, "pw")
    assert who.members == {"alice": "vision", "bob": "vision"}
    assert who.team_members() == {"vision": ["alice", "bob"]}
    vision = who.of("team", "vision")
    assert vision.email == ("vision@example.org",)
    assert vision.webhook is not None and vision.webhook.format == "teams"
    alice = who.of("user", "alice")  # the domain rule and the default webhook
    assert alice.email == ("alice@example.org",)
    assert alice.webhook is not None and alice.webhook.url == "https://hooks.example.org/all"
    assert who.of("user", "carol").email == ("carol.doe@example.org",)
    assert who.of("team", "nlp").email == ()


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ('[smtp]\nhost = "h"\nfrom = "a@b"\nuser = "u"\n', {},
         r"\[smtp\] user 'u' is set but \$GPULENS_SMTP_PASSWORD holds no password"),
        ('[smtp]\nhost = "h"\n', {}, r"\[smtp\] needs host and from"),
        ('[smtp]\nhost = "h"\nfrom = "a@b"\nport = 0\n', {}, r"port = 0 must be a port"),
        ('[webhook]\nurl = "https://x"\nformat = "irc"\n', {}, r"format = 'irc': use one of"),
        ('[teams.a]\nmembers = ["u"]\n[teams.b]\nmembers = ["u"]\n', {},
         r"\[teams.b\] 'u' is also a member of 'a'"),
        ('[users.u]\nemail = "not-an-address"\n', {}, r"\[users.u\] email = 'not-an-address'"),
        ('[slack]\nurl = "https://x"\n', {}, r"unknown table\(s\) \['slack'\]"),
    ],
)  # fmt: skip
def test_bad_entries_are_one_clear_error(text: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_recipients(tomllib.loads(text), "d.toml", env=env)


def test_password_from_a_file_when_the_variable_is_unset(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-file\n", encoding="utf-8")
    text = f'[smtp]\nhost = "h"\nfrom = "a@b"\nuser = "u"\npassword_file = "{secret}"\n'
    who = parse_recipients(tomllib.loads(text), "d.toml", env={})
    assert who.smtp is not None and who.smtp.password == "from-file"
    env = {"GPULENS_SMTP_PASSWORD": "from-env"}
    smtp = parse_recipients(tomllib.loads(text), "d.toml", env=env).smtp
    assert smtp is not None and smtp.password == "from-env"


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        load_recipients(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[smtp\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_recipients(bad)
    assert load_recipients(None).smtp is None
