"""A small element tree built with expat that remembers each element's line.

`xml.etree` forgets where an element was; error messages must name the line, so the XML parser
builds this instead. It keeps only what the nvidia-smi parser reads: tag, stripped text,
children and line. Subtrees under `skip` tags (the long supported-clocks lists) are not built.
"""

from __future__ import annotations

from collections.abc import Iterator
from xml.parsers import expat

from gpulens.collect.nvidia_smi.errors import NvidiaSmiParseError


class Node:
    """One XML element: `tag`, `text` (stripped), `children` in order, 1-based `line`."""

    __slots__ = ("_parts", "children", "line", "tag", "text")

    def __init__(self, tag: str, line: int) -> None:
        self.tag = tag
        self.line = line
        self.text = ""
        self.children: list[Node] = []
        self._parts: list[str] = []

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


def _blank(text: str, tag: str) -> str:
    """`text` with the content of each `<tag>...</tag>` replaced by its newlines.

    Lines stay where they were (errors still name the right line) while expat never sees the
    hundreds of elements inside, which is most of the parse time for supported-clock lists.
    Content whose end tag is missing is left alone for expat to report.
    """
    opening, closing = f"<{tag}>", f"</{tag}>"
    start = text.find(opening)
    if start < 0:
        return text
    parts: list[str] = []
    pos = 0
    while start >= 0:
        inner = start + len(opening)
        end = text.find(closing, inner)
        if end < 0:
            break
        parts.append(text[pos:inner])
        parts.append("\n" * text.count("\n", inner, end))
        pos = end
        start = text.find(opening, end + len(closing))
    parts.append(text[pos:])
    return "".join(parts)


def parse_tree(
    text: str, source: str, skip: frozenset[str] = frozenset(), blank: tuple[str, ...] = ()
) -> Node:
    """Parse XML `text` into Nodes; any XML error becomes NvidiaSmiParseError with the line.

    Elements under a `skip` tag are not built; the content of `blank` tags is not even parsed
    (it must be flat text-free markup nobody reads, such as `<supported_clocks>`).
    """
    for tag in blank:
        text = _blank(text, tag)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        line = text.count("\n", 0, exc.start) + 1
        raise NvidiaSmiParseError(
            source, line, f"text is not valid Unicode ({exc.reason})"
        ) from None
    parser = expat.ParserCreate()
    parser.buffer_text = True
    stack: list[Node] = []
    roots: list[Node] = []
    skipping = 0

    def start(tag: str, _attrs: dict[str, str]) -> None:
        nonlocal skipping
        if skipping:
            skipping += 1
            return
        node = Node(tag, parser.CurrentLineNumber)
        if stack:
            stack[-1].children.append(node)
        else:
            roots.append(node)
        if tag in skip:
            skipping = 1
        stack.append(node)

    def end(_tag: str) -> None:
        nonlocal skipping
        if skipping > 1:
            skipping -= 1
            return
        skipping = 0
        node = stack.pop()
        node.text = "".join(node._parts).strip()
        node._parts = []

    def chars(data: str) -> None:
        if stack and not skipping:
            stack[-1]._parts.append(data)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = chars
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        detail = expat.ErrorString(exc.code) if exc.code else str(exc)
        raise NvidiaSmiParseError(
            source, exc.lineno, f"not well-formed XML ({detail}, column {exc.offset + 1})"
        ) from None
    except RecursionError:  # pragma: no cover - expat limits nesting before Python does
        raise NvidiaSmiParseError(source, 0, "XML nested too deeply") from None
    if not roots:
        raise NvidiaSmiParseError(source, 1, "no XML element found")
    return roots[0]
