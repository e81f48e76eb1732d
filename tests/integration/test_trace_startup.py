"""`gpulens trace` starts fast: it imports no CLI framework, web or store library, and its one
parser (present/trace_cli.py) gives the same help and errors whether the command comes straight
from the entry point or through the Typer app."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpulens.present import cli, trace_cli
from gpulens.present.reports import trace as trace_report

HEAVY = {"typer", "click", "rich", "pydantic", "fastapi", "starlette", "duckdb", "pyarrow"}
TINY = (
    "data/traces/HolisticTraceAnalysis/tests/data/critical_path/alexnet/"
    "benchmark_result_2869224_1695835535_trace.json.gz"
)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["COLUMNS"] = "200"
    return env


def _gpulens(*args: str, importtime: bool = False) -> subprocess.CompletedProcess[str]:
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run(
        [sys.executable, *flags, "-m", "gpulens", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        check=False,
    )


def _imported(stderr: str) -> set[str]:
    """Top-level packages named by `-X importtime`'s lines."""
    return {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--format", "json"], id="analysis"),
        pytest.param(["--help"], id="help"),
        pytest.param(["--format", "nope"], id="usage-error"),
        pytest.param(["missing.json"], id="trace-error"),
    ],
)
def test_trace_imports_no_cli_framework(args: list[str], shared: Path, tmp_path: Path) -> None:
    trace = shared / TINY
    if args[0].startswith("--format"):
        args = [str(trace), *args]
    if args[0] == "missing.json":
        args = [str(tmp_path / "missing.json")]
    result = _gpulens("trace", *args, importtime=True)
    imported = _imported(result.stderr)
    assert "gpulens" in imported and not imported & HEAVY, sorted(imported & HEAVY)
    if "--help" not in args and "nope" not in args and "missing.json" not in args[0]:
        assert result.returncode == 0 and result.stdout.startswith("{")


def test_other_commands_still_go_through_typer() -> None:
    result = _gpulens("--help", importtime=True)
    assert result.returncode == 0 and "typer" in _imported(result.stderr)
    assert "trace" in result.stdout and trace_cli.HELP[:40] in result.stdout


def test_help_lists_every_option_with_its_help() -> None:
    result = _gpulens("trace", "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # argparse wraps the help texts
    assert trace_cli.HELP in text and "Usage: gpulens trace [OPTIONS] PATHS..." in text
    for param in trace_cli.PARAMS:
        assert param.help in text
        for flag in param.flags:
            assert flag.upper() in text if not flag.startswith("-") else flag in text
    assert "--no-hta-window" in text and "[default: terminal]" in text


def test_the_typer_command_gives_the_same_help_and_errors() -> None:
    """`gpulens trace` through the Typer app (`present.cli.main`) and straight from the entry
    point: the same text and the same exit code."""
    runner = CliRunner()
    for args in (["--help"], [], ["x.json", "--format", "nope"], ["x.json", "--bogus"]):
        direct = _gpulens("trace", *args)
        via_app = runner.invoke(cli.app, ["trace", *args], env={"COLUMNS": "200"})
        assert via_app.exit_code == direct.returncode, (args, via_app.output)
        assert via_app.output.strip() == (direct.stdout + direct.stderr).strip(), args


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "PATHS"),
        (["x.json", "--format", "nope"], "--format"),
        (["x.json", "--bogus"], "--bogus"),
        (["x.json", "--output"], "--output"),
    ],
)
def test_usage_errors_exit_2_naming_the_argument(args: list[str], needle: str) -> None:
    result = _gpulens("trace", *args)
    assert result.returncode == 2 and result.stdout == ""
    assert "Error:" in result.stderr and needle in result.stderr
    assert "Try 'gpulens trace --help' for help." in result.stderr
    assert "Traceback" not in result.stderr


def test_debug_before_trace_shows_the_traceback(tmp_path: Path) -> None:
    result = _gpulens("--debug", "trace", str(tmp_path / "missing.json"))
    assert result.returncode != 0 and "Traceback" in result.stderr
    assert "TraceFormatError" in result.stderr


def test_options_parse_as_the_typer_command_did(shared: Path, tmp_path: Path) -> None:
    """Options after the paths, `-o`, a repeated `--compare`, `--hta-window`."""
    trace = str(shared / TINY)
    out = tmp_path / "r.md"
    result = _gpulens(
        "trace", trace, "--format", "markdown", "-o", str(out), "--compare", trace, "--hta-window"
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == f"wrote {out}" and result.stdout == ""
    assert out.read_text(encoding="utf-8").startswith("#")
    args = trace_cli.parser().parse_intermixed_args(
        ["a", "--compare", "b", "c", "--compare", "d", "--no-hta-window", "--format=html"]
    )
    assert args.paths == ["a", "c"] and args.compare == ["b", "d"]
    assert args.hta_window is False and args.format == "html" and args.output is None


def test_the_formats_are_the_renderers() -> None:
    assert trace_cli.FORMATS == trace_report.FORMATS == tuple(trace_report.RENDERERS)


def test_usage_errors_of_the_typer_commands_exit_2() -> None:
    """Typer ≥ 0.26 raises its usage errors from its own copy of click: they are usage errors
    all the same (Click's message, exit code 2), not internal errors."""
    result = _gpulens("report", "--format", "nope")
    assert result.returncode == 2 and "Usage:" in result.stderr and "--format" in result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
