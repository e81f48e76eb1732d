"""The one error the nvidia-smi parsers raise: it names the source, the line and the problem."""

from __future__ import annotations

from gpulens.errors import CollectError


class NvidiaSmiParseError(CollectError):
    """nvidia-smi output gpulens cannot read: corrupt or truncated XML/CSV, a bad value.

    `source` is the file or command the text came from, `line` the 1-based line of the problem
    (0 when the text has no line to blame), `detail` what was wrong, quoting the value.
    """

    def __init__(self, source: str, line: int, detail: str) -> None:
        self.source = source
        self.line = line
        self.detail = detail
        where = f"{source}, line {line}" if line > 0 else source
        super().__init__(
            f"cannot parse nvidia-smi output from {where}: {detail}. Check that the command "
            "prints what gpulens asks for (`nvidia-smi -q -x`, or `nvidia-smi --query-gpu=... "
            "--format=csv`) and that the driver works; report the output if it does."
        )
