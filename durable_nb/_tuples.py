"""Named tuples declared as ``typing.NamedTuple`` declares them, made with a third less work.

``class Row(Typed):`` with annotated fields (and defaults, methods, a docstring) gives the class
``class Row(NamedTuple):`` gives: ``collections.namedtuple``'s, with the annotations and the
class body's attributes set on it. What ``typing`` adds on top, a check of every annotation and
setting the class's bases again, was a third of defining one; a kernel defines fourteen to attach.
Type checkers read ``Typed`` as ``typing.NamedTuple`` itself. (An annotation kept as text stays
text, where typing would make it a ``ForwardRef``: the modules using this evaluate theirs.)
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

__all__ = ["Typed"]

# As typing.NamedTuple has them: attributes a class body may not set, and those it does not copy.
_PROHIBITED = frozenset(
    {
        "__new__",
        "__init__",
        "__slots__",
        "__getnewargs__",
        "_fields",
        "_field_defaults",
        "_make",
        "_replace",
        "_asdict",
        "_source",
    }
)
_SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})


class _TypedMeta(type):
    def __new__(cls, typename: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
        if not bases:
            return super().__new__(cls, typename, bases, namespace)  # Typed itself
        if len(bases) != 1:
            raise TypeError("a named tuple inherits from Typed alone")
        types = namespace.get("__annotations__", {})
        with_default: list[str] = []
        for name in types:
            if name in namespace:
                with_default.append(name)
            elif with_default:
                raise TypeError(f"Non-default namedtuple field {name} cannot follow default field {with_default[-1]}")
        made = collections.namedtuple(  # type: ignore[misc]
            typename, list(types), defaults=[namespace[name] for name in with_default], module=namespace["__module__"]
        )
        made.__annotations__ = made.__new__.__annotations__ = dict(types)
        for key, value in namespace.items():
            if key in _PROHIBITED:
                raise AttributeError("Cannot overwrite NamedTuple attribute " + key)
            if key not in _SPECIAL and key not in made._fields:
                setattr(made, key, value)
        return made


if TYPE_CHECKING:
    from typing import NamedTuple as Typed
else:

    class Typed(metaclass=_TypedMeta):
        """The base a named tuple's class statement names."""
