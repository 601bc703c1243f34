"""statsmodels' formula models, restored with the names their formula was evaluated with.

statsmodels does not pickle a formula model's design (patsy refuses to): unpickling evaluates
the formula again, looking its names up in the frames that unpickle it. Restored into a
notebook's namespace as it is now, a function the formula calls may since have been defined
again (``def shift`` in a later cell), and the model would come back computing other numbers,
silently. patsy keeps, for each term, the names it looked up when the model was made; those are
pickled with the model's data and put in front of the namespace while statsmodels rebuilds it.
"""

from __future__ import annotations

import builtins
import contextvars
import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["call_in_namespace", "data_class", "reduce_formula_data", "restore_target"]

T = TypeVar("T")

# The notebook namespace values are being restored into, if any (set by the engine's restore): a
# model's formula finds there the names it did not store.
restore_target: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "durable_nb_restore_into", default=None
)

# Two frames over a namespace, as a cell calling a function that unpickles would give (statsmodels
# looks two frames up first), compiled on their own: a frame of a module carries its ``__future__`` flags.
_CALL_IN_NAMESPACE = compile(
    "(lambda _durable_nb_call: _durable_nb_call())(_durable_nb_call)", "<durable_nb restore>", "eval", dont_inherit=True
)


def call_in_namespace(namespace: dict[str, Any], call: Callable[[], T]) -> T:
    """Return ``call()``, made from frames whose globals are ``namespace`` (a library reading its
    callers' frames while unpickling finds the notebook's names there, not durable_nb's)."""
    return eval(_CALL_IN_NAMESPACE, namespace, {"_durable_nb_call": call})  # type: ignore[no-any-return]


def data_class() -> type | None:
    """statsmodels' class of a model's data, if statsmodels is imported."""
    return getattr(sys.modules.get("statsmodels.base.data"), "ModelData", None)


def formula_names(data: Any) -> dict[str, Any] | None:
    """The values a model's formula read by name when it was made, or None when it has no formula."""
    infos = getattr(data.__dict__.get("model_spec"), "factor_infos", None)
    if not isinstance(infos, Mapping):
        return None  # no formula, or another formula library than patsy
    names: dict[str, Any] = {}
    for factor, info in infos.items():
        state = getattr(info, "state", None)
        code = getattr(factor, "code", None)
        env = state.get("eval_env") if isinstance(state, dict) else None
        if env is None or not isinstance(code, str):
            continue
        try:
            read = compile(code, "<formula>", "eval").co_names
        except SyntaxError:
            return None
        known = getattr(env, "namespace", None)
        if known is None:
            return None
        names.update((name, known[name]) for name in read if name in known)
    return names


def reduce_formula_data(data: Any) -> tuple[Any, ...] | None:
    """How to pickle a formula model's data so that it unpickles with its formula's own names."""
    if getattr(type(data), "__setstate__", None) is None:
        return None  # statsmodels rebuilds nothing on unpickling: pickled as it pickles itself
    names = formula_names(data)
    if not names:
        return None
    return (_new_data, (type(data),), (data.__getstate__(), names), None, None, _set_state)


def _new_data(kind: type) -> Any:
    return kind.__new__(kind)


def _set_state(data: Any, state: tuple[dict[str, Any], dict[str, Any]]) -> Any:
    fields, names = state
    namespace = restore_target.get()
    scope = {**(namespace if namespace is not None else {"__builtins__": builtins}), **names}
    call_in_namespace(scope, functools.partial(data.__setstate__, fields))
    return data
