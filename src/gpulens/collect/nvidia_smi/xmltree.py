"""A small element tree built with expat that remembers each element's line.

`xml.etree` forgets where an element was; error messages must name the line, so the XML parser
builds this instead. It keeps only what the nvidia-smi parser reads: tag, stripped text,
children and line. Subtrees under `skip` tags (the long supported-clocks lists) are not built.

Bounded: no entity is declared or expanded (a DTD that declares one, or a reference to one, is
refused: nvidia-smi writes none, and XXE or billion-laughs files are), bytes are UTF-8 unless
the XML declaration names another encoding, the text of one element is at most
`limits.max_string_bytes`, nesting at most `limits.max_nesting`, and at most `MAX_ELEMENTS`
elements are built.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator
from xml.parsers import expat

from gpulens.collect.inputs import DEFAULT_LIMITS, Limits, too_large
from gpulens.collect.nvidia_smi.errors import NvidiaSmiParseError
from gpulens.errors import InputTooLarge

MAX_ELEMENTS = 1_000_000  # an nvidia-smi document of 8 GPUs holds about 4,000
_DECLARED = re.compile(rb"""^\s*<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")


class Node:
    """One XML element: `tag`, `text` (stripped), `children` in order, 1-based `line`."""

    __slots__ = ("_parts", "_size", "children", "line", "tag", "text")

    def __init__(self, tag: str, line: int) -> None:
        self.tag = tag
        self.line = line
        self.text = ""
        self.children: list[Node] = []
        self._parts: list[str] = []
        self._size = 0

    def child(self, tag: str) -> Node | None:
        """The first child called `tag`, or None."""
        for node in self.children:
            if node.tag == tag:
                return node
        return None

    def find(self, *path: str) -> Node | None:
        """The first descendant along `path` (each step a child tag), or None."""
        node: Node | None = self
        for tag in path:
            if node is None:
                return None
            node = node.child(tag)
        return node

    def all(self, tag: str) -> Iterator[Node]:
        """Every child called `tag`, in document order."""
        return (node for node in self.children if node.tag == tag)


def _blank(data: bytes, tag: str) -> bytes:
    """`data` with the content of each `<tag>...</tag>` replaced by its newlines.

    Lines stay where they were (errors still name the right line) while expat never sees the
    hundreds of elements inside, which is most of the parse time for supported-clock lists.
    Content whose end tag is missing is left alone for expat to report.
    """
    opening, closing = f"<{tag}>".encode(), f"</{tag}>".encode()
    start = data.find(opening)
    if start < 0:
        return data
    parts: list[bytes] = []
    pos = 0
    while start >= 0:
        inner = start + len(opening)
        end = data.find(closing, inner)
        if end < 0:
            break
        parts.append(data[pos:inner])
        parts.append(b"\n" * data.count(b"\n", inner, end))
        pos = end
        start = data.find(opening, end + len(closing))
    parts.append(data[pos:])
    return b"".join(parts)


def parse_tree(
    text: str | bytes,
    source: str,
    skip: frozenset[str] = frozenset(),
    blank: tuple[str, ...] = (),
    limits: Limits = DEFAULT_LIMITS,
) -> Node:
    """Parse XML `text` into Nodes; any XML error becomes NvidiaSmiParseError with the line.

    Elements under a `skip` tag are not built; the content of `blank` tags is not even parsed
    (it must be flat text-free markup nobody reads, such as `<supported_clocks>`). Bytes are
    decoded as the XML declaration says (UTF-8 when it says nothing).
    """
    if isinstance(text, str):
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            line = text.count("\n", 0, exc.start) + 1
            raise NvidiaSmiParseError(
                source, line, f"text is not valid Unicode ({exc.reason})"
            ) from None
    else:
        data = text
    for tag in blank:
        data = _blank(data, tag)
    return parse_tree_chunks((data,), source, skip, limits)


def parse_tree_chunks(
    chunks: Iterable[bytes],
    source: str,
    skip: frozenset[str] = frozenset(),
    limits: Limits = DEFAULT_LIMITS,
) -> Node:
    """`parse_tree` over the bytes of a stream, fed to expat one chunk at a time."""
    builder = _Builder(source, skip, limits)
    lines = 1
    utf8: codecs.IncrementalDecoder | None = None
    first = True
    for chunk in chunks:
        if first:
            declared = _DECLARED.match(chunk)
            if declared is None or declared.group(1).lower().replace(b"_", b"-") == b"utf-8":
                utf8 = codecs.getincrementaldecoder("utf-8")()
            first = False
        if utf8 is not None:
            _check_utf8(utf8, chunk, lines, source)
        builder.feed(chunk, False)
        lines += chunk.count(b"\n")
    if utf8 is not None:
        _check_utf8(utf8, b"", lines, source, final=True)
    builder.feed(b"", True)
    return builder.root()


def _check_utf8(
    decoder: codecs.IncrementalDecoder, chunk: bytes, lines: int, source: str, final: bool = False
) -> None:
    try:
        decoder.decode(chunk, final)
    except UnicodeDecodeError as exc:
        line = lines + chunk.count(b"\n", 0, exc.start)
        bad = exc.object[exc.start : exc.start + 1]
        raise NvidiaSmiParseError(
            source,
            line,
            f"the bytes are not UTF-8 (byte 0x{bad.hex()}) and the XML declaration names no "
            "other encoding; nvidia-smi writes UTF-8: convert the file to UTF-8 or declare its "
            "encoding",
        ) from None


class _Builder:
    """Expat handlers that build Nodes within the limits."""

    def __init__(self, source: str, skip: frozenset[str], limits: Limits) -> None:
        self.source = source
        self.skip = skip
        self.limits = limits
        self.parser = expat.ParserCreate()
        self.parser.buffer_text = True
        self.stack: list[Node] = []
        self.roots: list[Node] = []
        self.skipping = 0
        self.elements = 0
        p = self.parser
        p.StartElementHandler = self.start
        p.EndElementHandler = self.end
        p.CharacterDataHandler = self.chars
        p.EntityDeclHandler = self.entity_decl
        p.SkippedEntityHandler = self.skipped_entity
        p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)

    def refuse(self, detail: str) -> NvidiaSmiParseError:
        return NvidiaSmiParseError(self.source, self.parser.CurrentLineNumber, detail)

    def entity_decl(self, name: str, *_rest: object) -> None:
        raise self.refuse(
            f"the document declares the entity {name!r}; nvidia-smi output declares none and "
            "gpulens expands none (external or recursive entities can read files or exhaust "
            "memory): use the unmodified output of `nvidia-smi -q -x`"
        )

    def skipped_entity(self, name: str, _is_parameter: bool) -> None:
        raise self.refuse(
            f"the document refers to the entity &{name}; which gpulens does not expand; use "
            "the unmodified output of `nvidia-smi -q -x`"
        )

    def start(self, tag: str, _attrs: dict[str, str]) -> None:
        depth = len(self.stack) + max(0, self.skipping - 1)
        if depth >= self.limits.max_nesting:
            where = f"{self.source}, line {self.parser.CurrentLineNumber}"
            raise too_large_nesting(where, self.limits.max_nesting)
        if self.skipping:
            self.skipping += 1
            return
        self.elements += 1
        if self.elements > MAX_ELEMENTS:
            raise self.refuse(
                f"more than {MAX_ELEMENTS:,} XML elements, far more than nvidia-smi writes for "
                "one machine: use the output of one `nvidia-smi -q -x` run per file"
            )
        node = Node(tag, self.parser.CurrentLineNumber)
        if self.stack:
            self.stack[-1].children.append(node)
        else:
            self.roots.append(node)
        if tag in self.skip:
            self.skipping = 1
        self.stack.append(node)

    def end(self, _tag: str) -> None:
        if self.skipping > 1:
            self.skipping -= 1
            return
        self.skipping = 0
        node = self.stack.pop()
        node.text = "".join(node._parts).strip()
        node._parts = []

    def chars(self, data: str) -> None:
        if not self.stack or self.skipping:
            return
        node = self.stack[-1]
        if data.isspace() and (node.children or not node._parts):
            return  # layout between elements, or before the text
        node._size += len(data)
        if node._size > self.limits.max_string_bytes:
            where = f"{self.source}, line {self.parser.CurrentLineNumber}"
            what = f"the text of <{node.tag}>"
            raise too_large(where, what, self.limits.max_string_bytes, "max_string_bytes")
        node._parts.append(data)

    def feed(self, data: bytes, final: bool) -> None:
        try:
            self.parser.Parse(data, final)
        except expat.ExpatError as exc:
            detail = expat.ErrorString(exc.code) if exc.code else str(exc)
            raise NvidiaSmiParseError(
                self.source, exc.lineno, f"not well-formed XML ({detail}, column {exc.offset + 1})"
            ) from None
        except RecursionError:  # pragma: no cover - expat limits nesting before Python does
            raise NvidiaSmiParseError(self.source, 0, "XML nested too deeply") from None

    def root(self) -> Node:
        if not self.roots:
            raise NvidiaSmiParseError(self.source, 1, "no XML element found")
        return self.roots[0]


def too_large_nesting(where: str, limit: int) -> InputTooLarge:
    """Nesting past `limits.max_nesting` (nvidia-smi nests about 5 deep)."""
    return InputTooLarge(
        f"{where}: XML elements are nested more than {limit} deep, the limit "
        "limits.max_nesting; if the input is genuine, raise limits.max_nesting (or "
        "GPULENS_LIMITS_MAX_NESTING), otherwise check the file"
    )
