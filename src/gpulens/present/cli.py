"""Command line entry point (placeholder until the CLI module lands)."""


def main() -> None:
    raise SystemExit(0)
