from typing import Any

from typing_extensions import Buffer

def scan(text: Buffer, start: int, end: int, /) -> tuple[Any, ...] | None: ...
