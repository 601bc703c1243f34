"""How the extension's answers carry errors: ``{"error": <class name>, "message"}`` with 400, 404, 409 or 503.

DurableError
 ├── StoreNotServed      a store key this server does not serve (404; stores.py)
 └── KernelNotAttached   a kernel this server does not run, or one attached to no run (404)
"""

from __future__ import annotations

from ..errors import (
    AlreadyResumed,
    CheckpointNotFound,
    DurableError,
    RunNotFound,
    RunOwnedElsewhere,
    StoreError,
    StoreNotFound,
    UnknownGate,
)
from .stores import StoreNotServed

__all__ = ["KernelNotAttached", "StoreNotServed", "status_of"]


class KernelNotAttached(DurableError, LookupError):
    """A kernel this Jupyter server does not run, or one that is attached to no durable run."""


# The first class an error is an instance of gives its status; anything else the caller sent is a 400.
_STATUS: tuple[tuple[type[DurableError], int], ...] = (
    (StoreNotServed, 404),
    (KernelNotAttached, 404),
    (RunNotFound, 404),
    (CheckpointNotFound, 404),
    (UnknownGate, 404),
    (StoreNotFound, 404),
    (AlreadyResumed, 409),
    (RunOwnedElsewhere, 409),
    (StoreError, 503),
)


def status_of(error: DurableError) -> int:
    """Return the HTTP status of a library error in the extension's answers."""
    return next((status for kind, status in _STATUS if isinstance(error, kind)), 400)
