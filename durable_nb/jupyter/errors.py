"""How the extension's answers carry errors: ``{"error": <class name>, "message"}`` with the statuses the service gives.

DurableError
 ├── StoreNotServed      a store key this server does not serve (404; stores.py)
 └── KernelNotAttached   a kernel this server does not run, or one attached to no run (404)
"""

from __future__ import annotations

from ..errors import DurableError
from ..service.errors import LIBRARY_STATUS, status_in
from .stores import StoreNotServed

__all__ = ["KernelNotAttached", "StoreNotServed", "status_of"]


class KernelNotAttached(DurableError, LookupError):
    """A kernel this Jupyter server does not run, or one that is attached to no durable run."""


# The extension's own errors first, then the library's, as the service maps them.
_STATUS: tuple[tuple[type[DurableError], int], ...] = (
    (StoreNotServed, 404),
    (KernelNotAttached, 404),
    *LIBRARY_STATUS,
)


def status_of(error: DurableError) -> int:
    """Return the HTTP status of a library error in the extension's answers."""
    return status_in(_STATUS, error)
