"""Serialised dashboard pages, shared by every viewer of the same analysis.

The dashboard keeps each page it builds with the analysed window it comes from, and hands every
request for that window the same page object until the window is analysed again. Turning that
object into JSON (validation, serialisation, gzip) is the same work for every viewer, so
`PageBodies` does it once per page object: the JSON bytes and, when a client asks for it, their
gzip. It holds the last `keep` pages (and so keeps each alive while it is cached: an id is never
reused for another page meanwhile); older ones are dropped whole.
"""

from __future__ import annotations

import gzip
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request, Response
from pydantic import TypeAdapter

#: bodies at least this long are gzipped for a client that accepts it (as GZipMiddleware)
GZIP_MIN_BYTES = 2048
#: cheaper than GZipMiddleware's level 9, done once per page instead of once per request
GZIP_LEVEL = 6
JSON = "application/json"


@dataclass
class _Body:
    page: object  # kept so that its id stays its own while cached
    json: bytes
    gzip: bytes | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class PageBodies:
    """The JSON (and gzip) body of the last `keep` page objects; thread-safe."""

    def __init__(self, keep: int = 24) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep!r}")
        self.keep = keep
        self._bodies: OrderedDict[int, _Body] = OrderedDict()
        self._adapters: dict[type, TypeAdapter[Any]] = {}
        self._lock = threading.Lock()
        self.serialised = 0  # pages turned into JSON (misses)
        self.compressed = 0  # bodies gzipped

    def __len__(self) -> int:
        with self._lock:
            return len(self._bodies)

    def response(self, request: Request, page: object) -> Response:
        """`page` as a JSON response, gzipped when the request accepts it and it is worth it."""
        body = self._body(page)
        if len(body.json) < GZIP_MIN_BYTES or "gzip" not in request.headers.get(
            "accept-encoding", ""
        ):
            return Response(body.json, media_type=JSON)
        with body.lock:
            if body.gzip is None:
                body.gzip = gzip.compress(body.json, compresslevel=GZIP_LEVEL)
                self.compressed += 1
        return Response(
            body.gzip,
            media_type=JSON,
            headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"},
        )

    def json(self, page: object) -> bytes:
        """The JSON bytes of `page` (serialised at most once while it is cached)."""
        return self._body(page).json

    def _body(self, page: object) -> _Body:
        key = id(page)
        with self._lock:
            body = self._bodies.get(key)
            if body is not None and body.page is page:
                self._bodies.move_to_end(key)
                return body
            adapter = self._adapters.get(type(page))
            if adapter is None:
                adapter = self._adapters[type(page)] = TypeAdapter(type(page))
        # serialised outside the lock: two first requests may both do it, none waits for it
        body = _Body(page, adapter.dump_json(page, by_alias=True))
        with self._lock:
            self.serialised += 1
            have = self._bodies.get(key)
            if have is not None and have.page is page:
                return have
            self._bodies[key] = body
            self._bodies.move_to_end(key)
            while len(self._bodies) > self.keep:
                self._bodies.popitem(last=False)
        return body
