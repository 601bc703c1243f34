"""How errors cross HTTP: a status code and ``{"error": type, "message": ...}``, and back into the same type.

The service adds errors of its own, about the notebooks it runs and the requests it refuses
before doing anything:

    DurableError
     ├── NotebookNotFound         no notebook at that path in the notebooks folder
     │    └── NotebooksNotServed  the server was started without --notebooks
     ├── ScheduleNotFound         no schedule of that id (404)
     ├── HostNotAllowed           a Host header the server does not answer for (400)
     ├── CrossSiteRequest         a state-changing request from another origin or without its CSRF token (403)
     └── InvalidInput
          ├── NotebookPathRefused a path that is absolute, climbs out of the folder, or is no .ipynb
          ├── InvalidSchedule     cron text, a time zone or a missed-time policy that cannot be used
          ├── UnsupportedMediaType a state-changing request whose body is not the type it must be (415)
          ├── BodyTooLarge        a body over the server's limit (413)
          └── JsonTooDeep         a JSON body nested deeper than the server reads (400)
"""

from __future__ import annotations

from typing import Any

from .. import errors
from ..errors import (
    AlreadyResumed,
    CheckpointNotFound,
    DurableError,
    IdempotencyKeyReused,
    InvalidInput,
    NotCancellable,
    NotResumable,
    RunNotFound,
    RunOwnedElsewhere,
    StoreError,
    StoreFailed,
    StoreNotFound,
    StoreUnavailable,
    UnknownGate,
    WorkflowMismatch,
    WorkflowNotFound,
)
from .auth import Forbidden, Unauthorized

__all__ = [
    "BodyTooLarge",
    "CrossSiteRequest",
    "HostNotAllowed",
    "InvalidSchedule",
    "JsonTooDeep",
    "LIBRARY_STATUS",
    "NotebookNotFound",
    "NotebookPathRefused",
    "NotebooksNotServed",
    "ScheduleNotFound",
    "UnsupportedMediaType",
    "error_body",
    "error_from",
    "status_in",
    "status_of",
]


class NotebookNotFound(DurableError, LookupError):
    """The notebooks folder holds no notebook at that path."""


class NotebooksNotServed(NotebookNotFound):
    """The server runs no notebooks: it was started without a notebooks folder."""


class NotebookPathRefused(InvalidInput):
    """A notebook path that is absolute, leads out of the notebooks folder, or names no .ipynb file."""


class ScheduleNotFound(DurableError, LookupError):
    """The store holds no schedule of that id."""


class InvalidSchedule(InvalidInput):
    """A schedule's cron text, time zone or missed-time policy that cannot be used."""


class HostNotAllowed(DurableError):
    """A request naming a Host the server does not answer for (a DNS rebinding page, a wrong name)."""


class CrossSiteRequest(DurableError):
    """A state-changing request from another origin, or a page's form without its valid CSRF token."""


class UnsupportedMediaType(InvalidInput):
    """A state-changing request whose body is not of the type the endpoint takes (JSON, or the page's form)."""


class BodyTooLarge(InvalidInput):
    """A request body larger than the server's limit (--max-body)."""


class JsonTooDeep(InvalidInput):
    """A JSON body nested deeper than the server reads."""


_OWN = {
    k.__name__: k
    for k in (
        Unauthorized,
        Forbidden,
        NotebookNotFound,
        NotebooksNotServed,
        NotebookPathRefused,
        ScheduleNotFound,
        InvalidSchedule,
        HostNotAllowed,
        CrossSiteRequest,
        UnsupportedMediaType,
        BodyTooLarge,
        JsonTooDeep,
    )
}

# What each library error means over HTTP, for every server durable_nb runs (this service and the
# Jupyter server extension): the first class an error is an instance of gives its status.
LIBRARY_STATUS: tuple[tuple[type[DurableError], int], ...] = (
    (RunNotFound, 404),
    (CheckpointNotFound, 404),
    (WorkflowNotFound, 404),
    (UnknownGate, 404),
    (StoreNotFound, 404),
    (AlreadyResumed, 409),
    (RunOwnedElsewhere, 409),
    (NotResumable, 400),
    (NotCancellable, 400),
    (WorkflowMismatch, 400),
    (IdempotencyKeyReused, 422),
    (InvalidInput, 400),
    (StoreUnavailable, 503),
    (StoreFailed, 503),
    # Any other store trouble (a newer schema, a value that cannot be read back) is the server's, not the caller's.
    (StoreError, 503),
)

# The service's own refusals come first: they are more precise than the library's classes they extend.
_STATUS: tuple[tuple[type[DurableError], int], ...] = (
    (Unauthorized, 401),
    (Forbidden, 403),
    (CrossSiteRequest, 403),
    (HostNotAllowed, 400),
    (UnsupportedMediaType, 415),
    (BodyTooLarge, 413),
    (NotebookNotFound, 404),
    (ScheduleNotFound, 404),
    *LIBRARY_STATUS,
)


def status_in(table: tuple[tuple[type[DurableError], int], ...], error: DurableError) -> int:
    """Return the status the first class of ``table`` that ``error`` is an instance of gives (400 if none)."""
    return next((status for kind, status in table if isinstance(error, kind)), 400)


def status_of(error: DurableError) -> int:
    """Return the HTTP status of a library error (400 when nothing more precise applies)."""
    return status_in(_STATUS, error)


def error_body(error: BaseException) -> dict[str, Any]:
    """Return the JSON body of an error response."""
    return {"error": type(error).__name__, "message": str(error)}


def error_from(body: Any, status: int) -> DurableError:
    """Rebuild the library error an error response stands for (DurableError for an unknown type)."""
    name = body.get("error") if isinstance(body, dict) else None
    message = body.get("message") if isinstance(body, dict) else None
    text = str(message or body or f"HTTP {status}")
    found = getattr(errors, str(name), None) or _OWN.get(str(name))
    kind = found if isinstance(found, type) and issubclass(found, DurableError) else DurableError
    error = kind.__new__(kind, text)
    Exception.__init__(error, text)
    return error
