"""The one error the scheduler readers raise on bad input."""

from __future__ import annotations

from gpulens.errors import CollectError


class SchedulerInputError(CollectError):
    """A scheduler file gpulens cannot read: names the file, what was wrong, and what to do."""

    def __init__(self, source: str, detail: str, fix: str) -> None:
        self.source = source
        self.detail = detail
        super().__init__(f"cannot read {source}: {detail}. {fix}")
