"""Frozen records: the trace model's and the analyses' result types (pure, no dependency).

A subclass declares its fields as annotations, with defaults (or `field(default_factory=...)`)
after the fields without one, and gets a positional-or-keyword `__init__`, `__repr__`, `__eq__`
and `__hash__` over the fields, and attributes that cannot be set again. It behaves as a frozen
dataclass (type checkers treat it as one), but the class is built without generating and
compiling code: defining the ~25 result types costs well under a millisecond, where dataclasses
take ~1.4 ms each and msgspec's import ~12 ms, a noticeable share of a short `gpulens trace`.
Instances pickle (the process and Dask executors send them between processes) and copy as any
object with a `__dict__` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, dataclass_transform

__all__ = ["Record", "field", "record_fields", "replace"]

_R = TypeVar("_R", bound="Record")
_MISSING: Any = object()


class _Factory:
    """A default made afresh for each instance (`field(default_factory=...)`)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def field(*, default: Any = _MISSING, default_factory: Callable[[], Any] | None = None) -> Any:
    """A field's default: a value shared by all instances, or a factory called for each."""
    if default_factory is not None:
        if default is not _MISSING:
            raise TypeError("give a field either a default or a default_factory, not both")
        return _Factory(default_factory)
    if default is _MISSING:
        raise TypeError("field() needs a default or a default_factory")
    return default


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class Record:
    """Base of the frozen record types (module docstring)."""

    __record_fields__: ClassVar[tuple[str, ...]] = ()
    __record_defaults__: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names = list(cls.__record_fields__)
        defaults = dict(cls.__record_defaults__)
        own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 - inspect costs ~6 ms
        for name, kind in own.items():
            if str(kind).startswith(("ClassVar", "typing.ClassVar")):
                continue
            if name not in names:
                names.append(name)
            if name in cls.__dict__:
                defaults[name] = cls.__dict__[name]
                delattr(cls, name)  # instances always hold their own value
            else:
                defaults.pop(name, None)
        seen_default = ""
        for name in names:
            if name in defaults:
                seen_default = name
            elif seen_default:
                raise TypeError(
                    f"{cls.__name__}: field {name!r} has no default but follows {seen_default!r}"
                )
        cls.__record_fields__ = tuple(names)
        cls.__record_defaults__ = defaults

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        names = self.__record_fields__
        if len(args) > len(names):
            raise TypeError(
                f"{type(self).__name__} takes {len(names)} arguments, {len(args)} given"
            )
        values = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key in values or key not in names:
                why = "given twice" if key in values else "unknown"
                raise TypeError(f"{type(self).__name__}: argument {key!r} {why}")
            values[key] = value
        defaults = self.__record_defaults__
        state = self.__dict__
        for name in names:
            if name in values:
                state[name] = values[name]
            elif name in defaults:
                default = defaults[name]
                state[name] = default.make() if type(default) is _Factory else default
            else:
                raise TypeError(f"{type(self).__name__}: missing argument {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot delete {name!r}")

    def _values(self) -> tuple[Any, ...]:
        state = self.__dict__
        return tuple(state[name] for name in self.__record_fields__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Record)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        state = self.__dict__
        inner = ", ".join(f"{name}={state[name]!r}" for name in self.__record_fields__)
        return f"{type(self).__name__}({inner})"


def record_fields(kind: type[Record]) -> tuple[str, ...]:
    """The field names of a record type, in declaration order."""
    return kind.__record_fields__


def replace(record: _R, **changes: Any) -> _R:
    """A copy of `record` with the fields in `changes` set to new values."""
    state = record.__dict__
    return type(record)(**{**{n: state[n] for n in record.__record_fields__}, **changes})
