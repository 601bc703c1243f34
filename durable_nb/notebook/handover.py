"""Which run a kernel started headless attaches to, handed over as data in the kernel's environment.

``run-notebook``, the papermill engine and the service start kernels for runs whose name, key and
store come from their users (a ``--run`` name, a file name, a store URL). None of that text may
become code: the starter puts it, as JSON, in the environment of the kernel it starts, and the
kernel runs the fixed line ``%durable run --from-env``, which reads it back as data.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from .._tuples import Typed
from ..errors import InvalidInput

__all__ = ["ATTACH_CODE", "ATTACH_VARIABLE", "Handover", "run_key"]

ATTACH_VARIABLE = "DURABLE_NB_ATTACH"
# Always this text, whatever the run is called: the run's name, key and store travel as data.
ATTACH_CODE = "%load_ext durable_nb\n%durable run --from-env"


# A named tuple, not a dataclass: %load_ext defines it, where a dataclass's generated methods cost a millisecond.
class Handover(Typed):
    """The run a headless kernel attaches to: its name, its key, the store it lives in, and the
    owner token of the process that claimed the run for this kernel (if one did)."""

    name: str
    key: str | None = None
    store: str | None = None
    claim: str | None = None

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of the kernel to start: ``base`` (default: this process's) with the hand-over."""
        # JSON with ASCII escapes: any name or URL fits an environment variable, newlines and NULs too.
        text = json.dumps({"name": self.name, "key": self.key, "store": self.store, "claim": self.claim})
        return {**(os.environ if base is None else base), ATTACH_VARIABLE: text}

    @classmethod
    def take(cls, environ: MutableMapping[str, str] | None = None) -> Handover:
        """Read the hand-over from the environment and remove it, so the notebook's own processes do not inherit it."""
        environ = os.environ if environ is None else environ
        text = environ.pop(ATTACH_VARIABLE, None)
        if text is None:
            raise InvalidInput(
                f"%durable run --from-env attaches a kernel started by durable-nb run-notebook or the papermill "
                f"engine, which set ${ATTACH_VARIABLE}; it is not set here. Use %durable run NAME instead."
            )
        try:
            found = json.loads(text)
            handover = cls(found["name"], found.get("key"), found.get("store"), found.get("claim"))
        except (ValueError, TypeError, KeyError) as error:
            raise InvalidInput(f"${ATTACH_VARIABLE} is not what run-notebook writes ({error}).") from None
        if not all(
            isinstance(v, str) for v in (handover.name, handover.key or "", handover.store or "", handover.claim or "")
        ):
            raise InvalidInput(f"${ATTACH_VARIABLE} holds a name, key, store or claim that is not text.")
        return handover


def run_key(path: Path, parameters: dict[str, Any]) -> str:
    """The key a notebook's run is found by: its path and its parameters.

    ``run-notebook`` finds its run by it; a kernel in ``--all`` mode keys a new run of its notebook
    file the same way (no parameters), so that ``run-notebook`` continues it.
    """
    identity = json.dumps([str(path), parameters], sort_keys=True, default=repr)
    return hashlib.sha256(identity.encode()).hexdigest()[:24]
