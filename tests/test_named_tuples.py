"""durable_nb's named tuples (``_tuples.Typed``) are the classes typing.NamedTuple makes."""

# Annotations evaluated, as the modules defining durable_nb's named tuples have them.

import pickle
from typing import Any, NamedTuple, get_type_hints

import pytest

from durable_nb._tuples import Typed


def _row(base: Any, name: str) -> Any:
    """One class statement over ``base`` (named ``name`` at this module's top level, to be pickled)."""

    class Row(base):  # type: ignore[misc, valid-type]
        """A row."""

        name: str
        size: int | None
        tags: tuple[str, ...] = ()
        kind: str = "plain"

        def label(self) -> str:
            return f"{self.name}:{self.kind}"

        @property
        def big(self) -> bool:
            return (self.size or 0) > 10

    Row.__qualname__ = name
    return Row


Made = _row(Typed, "Made")
Typing = _row(NamedTuple, "Typing")


def test_a_typed_named_tuple_is_what_typing_makes() -> None:
    """Fields, defaults, annotations, docstring, methods, repr, equality, _replace, _asdict, _make, pickling."""
    made, typed = Made("a", 12, kind="x"), Typing("a", 12, kind="x")
    assert made == typed == ("a", 12, (), "x") and hash(made) == hash(typed)
    assert Made._fields == Typing._fields and Made._field_defaults == Typing._field_defaults
    assert Made.__annotations__ == Typing.__annotations__ == Made.__new__.__annotations__
    assert get_type_hints(Made) == get_type_hints(Typing)
    assert Made.__doc__ == Typing.__doc__ == "A row."
    assert (Made.__module__, Made.__name__, Made.__bases__) == (Typing.__module__, Typing.__name__, (tuple,))
    assert repr(made) == repr(typed) == "Row(name='a', size=12, tags=(), kind='x')"
    assert made.label() == "a:x" and made.big
    assert made._replace(size=1) == ("a", 1, (), "x") and isinstance(made._replace(size=1), Made)
    assert made._asdict() == typed._asdict()
    assert Made._make(["b", None, ("t",), "y"]) == Made(name="b", size=None, tags=("t",), kind="y")
    assert pickle.loads(pickle.dumps(made)) == made and type(pickle.loads(pickle.dumps(made))) is Made
    a, b, c, d = made
    assert (a, b, c, d) == ("a", 12, (), "x") and Made.size.__doc__ == Typing.size.__doc__
    with pytest.raises(TypeError):
        Made("only a name")
    with pytest.raises(AttributeError):
        made.name = "b"  # type: ignore[misc]


def test_a_typed_named_tuple_refuses_what_typing_refuses() -> None:
    """A field without a default after one with, and a body setting a named tuple's own attribute."""
    with pytest.raises(TypeError, match="Non-default namedtuple field b cannot follow default field a"):

        class Late(Typed):
            a: int = 0
            b: int

    with pytest.raises(AttributeError, match="Cannot overwrite NamedTuple attribute _replace"):

        class Own(Typed):
            a: int

            def _replace(self) -> None:  # type: ignore[override]
                pass
