"""@idempotent: a call's result is stored per run, so a repeat in the same run never re-runs it."""

from __future__ import annotations

import functools
import hashlib
import inspect
import pickle
from collections.abc import Callable
from typing import Any, TypeVar, overload

import cloudpickle

from ..._loop import run_sync
from ...model import Commit
from ...store import codec
from .scope import NodeScope, current_scope

__all__ = ["call_key", "idempotent"]

F = TypeVar("F", bound=Callable[..., Any])


def _qualified(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def call_key(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], key: Callable[..., Any] | None
) -> str:
    """Return the sha256 that names one call: qualified name plus arguments (or ``key(...)``)."""
    material: Any = key(*args, **kwargs) if key is not None else [list(args), kwargs]
    if codec.is_plain(material):
        data = b"j" + codec.encode_json(material)
    else:
        data = b"p" + cloudpickle.dumps(material, protocol=pickle.HIGHEST_PROTOCOL)
    return hashlib.sha256(_qualified(fn).encode() + b"\0" + data).hexdigest()


async def _lookup(scope: NodeScope, digest: str) -> tuple[bool, Any]:
    value_hash = await scope.store.get_idempotent(scope.run_id, digest)
    if value_hash is None:
        return False, None
    blobs = await scope.store.get_blobs([value_hash])
    if value_hash not in blobs:
        return False, None
    return True, codec.decode(blobs[value_hash], scope.secret)


async def _remember(scope: NodeScope, digest: str, fn: Callable[..., Any], value: Any) -> None:
    blob = codec.encode(value, scope.secret, f"result of {_qualified(fn)}")
    await scope.store.commit(Commit(run_id=scope.run_id, blobs=[blob], idempotent=[(digest, blob.hash)]))


@overload
def idempotent(fn: F, *, key: Callable[..., Any] | None = None) -> F: ...
@overload
def idempotent(fn: None = None, *, key: Callable[..., Any] | None = None) -> Callable[[F], F]: ...


def idempotent(fn: Any = None, *, key: Callable[..., Any] | None = None) -> Any:
    """Store a function's result per run; a repeated call in the same run returns it unrun.

    The call is named by sha256 of the function's qualified name and its arguments, or of
    ``key(*args, **kwargs)``. Outside a durable node the function simply runs.

    Args:
        fn: The function, sync or async (given when used as ``@dnb.idempotent``).
        key: A function of the call's arguments that names the call instead of the arguments
            themselves (for arguments that do not pickle, or that differ without mattering).

    Returns:
        The function wrapped (or a decorator, when only ``key`` is given).

    Example:
        >>> @dnb.idempotent
        ... def charge(customer: str, cents: int) -> str:
        ...     return payments.charge(customer, cents)  # runs once per run and arguments
    """
    if fn is None:
        return lambda f: idempotent(f, key=key)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            scope = current_scope()
            if scope is None:
                return await fn(*args, **kwargs)
            digest = call_key(fn, args, kwargs, key)
            if scope.remote is not None:
                found, value = scope.remote.lookup(digest)
                if not found:
                    value = await fn(*args, **kwargs)
                    scope.remote.remember(digest, value)
                return value
            found, value = await _lookup(scope, digest)
            if found:
                return value
            value = await fn(*args, **kwargs)
            await _remember(scope, digest, fn, value)
            return value

        async_wrapper.__durable_nb_rebuild__ = (_rebuild, (fn, key))  # type: ignore[attr-defined]
        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        scope = current_scope()
        if scope is None:
            return fn(*args, **kwargs)
        digest = call_key(fn, args, kwargs, key)
        if scope.remote is not None:
            # On an executor's worker: the owner commits the result with the item's outcome.
            found, value = scope.remote.lookup(digest)
            if not found:
                value = fn(*args, **kwargs)
                scope.remote.remember(digest, value)
            return value
        found, value = run_sync(_lookup(scope, digest))
        if found:
            return value
        value = fn(*args, **kwargs)
        run_sync(_remember(scope, digest, fn, value))
        return value

    wrapper.__durable_nb_rebuild__ = (_rebuild, (fn, key))  # type: ignore[attr-defined]
    return wrapper


def _rebuild(fn: Callable[..., Any], key: Callable[..., Any] | None) -> Any:
    # A stored notebook variable holding a wrapper comes back by wrapping its function again.
    return idempotent(fn, key=key)
