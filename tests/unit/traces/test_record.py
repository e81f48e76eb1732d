"""`Record`: frozen result types with a positional-or-keyword constructor, equality, hashing,
pickling and copies, without msgspec or generated code."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from typing import ClassVar

import pytest

from gpulens.analyze.traces.record import Record, field, record_fields, replace


class Point(Record):
    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)
    UNIT: ClassVar[str] = "ns"


class Point3(Point):
    z: int = 5


def test_arguments_by_position_keyword_and_default() -> None:
    p = Point(1, tags=["a"])
    assert (p.x, p.y, p.tags) == (1, 0, ["a"])
    assert record_fields(Point) == ("x", "y", "tags")
    assert Point.UNIT == "ns"
    assert Point(1).tags is not Point(1).tags  # a fresh list per instance


def test_a_subclass_adds_fields_after_its_base() -> None:
    p = Point3(1, 2, [], 9)
    assert record_fields(Point3) == ("x", "y", "tags", "z")
    assert p.z == 9 and Point3(1).z == 5


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "missing argument 'x'"),
        ((1, 2, [], 4), {}, "takes 3 arguments, 4 given"),
        ((1,), {"x": 2}, "'x' given twice"),
        ((1,), {"w": 2}, "'w' unknown"),
    ],
)
def test_wrong_arguments_are_refused(
    args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        Point(*args, **kwargs)


def test_a_field_without_default_after_one_with_is_refused() -> None:
    with pytest.raises(TypeError, match="'b' has no default but follows 'a'"):

        class Bad(Record):
            a: int = 1
            b: int


def test_frozen_equal_hashable_and_printable() -> None:
    p = Point(1, 2)
    with pytest.raises(AttributeError, match="frozen"):
        p.x = 3  # type: ignore[misc]
    with pytest.raises(AttributeError, match="frozen"):
        del p.x  # type: ignore[misc]
    assert p == Point(1, 2) and p != Point(1, 3) and p != Point3(1, 2)
    assert hash(Point(1, 2, ())) == hash(Point(1, 2, ()))  # type: ignore[arg-type]
    assert repr(p) == "Point(x=1, y=2, tags=[])"


def test_replace_pickle_and_copy_keep_the_values() -> None:
    p = Point3(1, 2, ["t"], 4)
    assert replace(p, y=7) == Point3(1, 7, ["t"], 4)
    assert pickle.loads(pickle.dumps(p)) == p
    assert copy.deepcopy(p) == p and copy.copy(p) == p


def test_the_trace_path_leaves_msgspec_unimported() -> None:
    code = (
        "import sys\n"
        "import gpulens.app.traces, gpulens.analyze.traces.breakdown\n"
        "print(sorted(m for m in ('msgspec', 'numpy.ma', 'gpulens.config') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
