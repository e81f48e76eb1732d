"""The input limits of the trace loader (the `limits.*` settings, passed in by the caller) and
the one error every limit gives (pure).

The loader does not read settings (analyze/ imports no configuration): gpulens.app.traces builds
`TraceLimits` from them. The defaults here are the settings' defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulens.errors import InputTooLarge

__all__ = ["DEFAULT_LIMITS", "TraceLimits", "too_large"]


@dataclass(frozen=True, slots=True)
class TraceLimits:
    """How much of one trace the loader reads before it refuses it (`limits.*`)."""

    max_inflated_bytes: int = 4 * 1024**3
    max_events: int = 8_000_000
    max_string_bytes: int = 1024 * 1024
    max_nesting: int = 64


DEFAULT_LIMITS = TraceLimits()


def too_large(name: str, what: str, limit: int, setting: str, unit: str = "bytes") -> InputTooLarge:
    """`name: what passes the limit of N unit (setting)`, with how to raise it."""
    env = "GPULENS_" + setting.replace(".", "_").upper()
    return InputTooLarge(
        f"{name}: {what} passes the limit of {limit:,} {unit} ({setting}); if the input is "
        f"genuine, raise the setting (or the environment variable {env})"
    )
