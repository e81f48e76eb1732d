"""Usage errors of every `gpulens` command, as a user makes them: a mistyped command, a
mistyped option, a missing argument or option value. Each exits 2 with the usage line and,
for a typo, the nearest name; none is an internal error (exit 70)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

GPULENS = [sys.executable, "-m", "gpulens"]

#: command → (a mistyped option, the option it should suggest)
TYPOS: dict[str, tuple[str, str]] = {
    "demo": ("--duraton", "--duration"),
    "record": ("--intreval", "--interval"),
    "ingest": ("--delimter", "--delimiter"),
    "query": ("--formt", "--format"),
    "report": ("--sinse", "--since"),
    "trace": ("--formt", "--format"),
    "doctor": ("--confg", "--config"),
    "agent": ("--lisen", "--listen"),
    "top": ("--simulatd", "--simulated"),
    "rules": ("--idle-fro", "--idle-for"),
    "fleet": ("--sequnce", "--sequence"),
    "digest": ("--perod", "--period"),
    "enforce": ("--dry-rn", "--dry-run"),
    "alerts": ("--hlep", "--help"),
    "profile": ("--stpes", "--steps"),
}
#: command → arguments that leave out a required argument or an option's value
MISSING: dict[str, list[str]] = {
    "demo": ["--data-dir"],
    "record": ["--config"],
    "ingest": [],
    "query": [],
    "report": ["--since"],
    "trace": [],
    "doctor": ["--config"],
    "agent": ["--listen"],
    "top": ["--interval"],
    "rules": ["--output"],
    "fleet": ["--sequence"],
    "digest": ["--period"],
    "enforce": ["--prometheus"],
    "alerts": ["receive", "--listen"],
    "profile": ["--steps"],
}
#: a mistyped command → the command it should suggest
COMMAND_TYPOS = {
    "dmeo": "demo",
    "recrod": "record",
    "ingset": "ingest",
    "qeury": "query",
    "reprot": "report",
    "tarce": "trace",
    "docter": "doctor",
    "agnet": "agent",
    "topp": "top",
    "rulse": "rules",
    "flete": "fleet",
    "dgiest": "digest",
    "enfroce": "enforce",
    "alrets": "alerts",
    "porfile": "profile",
}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["COLUMNS"] = "200"
    return subprocess.run(
        [*GPULENS, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def assert_usage_error(result: subprocess.CompletedProcess[str], command: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    usage = next(line for line in result.stderr.splitlines() if line.startswith("Usage:"))
    assert f"gpulens {command}".rstrip() in usage, usage
    assert result.stdout == ""


def test_every_command_is_covered() -> None:
    """Every command `gpulens --help` lists has its cases here."""
    result = run("--help")
    assert result.returncode == 0, result.stderr
    commands = result.stdout.split("Commands", 1)[1]
    listed = set(re.findall(r"^│ ([a-z][a-z_-]*) ", commands, re.MULTILINE))
    assert listed == set(TYPOS) == set(MISSING) == set(COMMAND_TYPOS.values()), listed


@pytest.mark.parametrize("command", sorted(TYPOS))
def test_a_mistyped_option_suggests_the_nearest(command: str) -> None:
    typo, meant = TYPOS[command]
    result = run(command, typo, "x")
    assert_usage_error(result, command)
    assert f"No such option: {typo}" in result.stderr
    assert f"Did you mean {meant}?" in result.stderr or (
        "Possible options:" in result.stderr and meant in result.stderr
    ), result.stderr


@pytest.mark.parametrize("command", sorted(MISSING))
def test_a_missing_argument_or_value_is_a_usage_error(command: str) -> None:
    result = run(command, *MISSING[command])
    assert_usage_error(result, command)
    text = result.stderr.lower()
    assert (
        "missing argument" in text
        or "requires an argument" in text
        or ("arguments are required" in text or "expected one argument" in text)
    ), result.stderr


@pytest.mark.parametrize("typo", sorted(COMMAND_TYPOS))
def test_a_mistyped_command_suggests_the_nearest(typo: str) -> None:
    result = run(typo)
    assert_usage_error(result, "")
    assert f"No such command '{typo}'" in result.stderr
    assert f"'{COMMAND_TYPOS[typo]}'" in result.stderr.split("No such command", 1)[1]


def test_trace_through_the_typer_app_answers_the_same() -> None:
    """The Typer app's `trace` command (present/cli.py's `main`, which the entry point
    bypasses for speed) hands its arguments to the same parser."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    code = "import sys; from gpulens.present.cli import main; sys.argv[0] = 'gpulens'; main()"
    result = subprocess.run(
        [sys.executable, "-c", code, "trace", "--outptu", "x.json", "t.json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert_usage_error(result, "trace")
    assert "No such option: --outptu Did you mean --output?" in result.stderr


def test_a_bad_choice_names_the_choices() -> None:
    result = run("report", "--format", "htm")
    assert_usage_error(result, "report")
    assert "'htm'" in result.stderr and "html" in result.stderr
