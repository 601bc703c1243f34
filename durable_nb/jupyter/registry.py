"""Which run and store each kernel of a Jupyter server is attached to: one small file per kernel.

A kernel a Jupyter server started (ipykernel, connection file ``kernel-<id>.json`` in the
server's runtime folder) writes ``durable-nb-kernel-<id>.json`` = ``{"kernel_id", "run_id",
"store", "pid"}`` beside its connection file when it attaches to a run, and removes it when it
exits. The server reads the files of the kernels
its own kernel manager runs, and no other: a file naming another kernel, or written by a
process that is not the kernel's, is ignored.
"""

# Annotations evaluated, not strings: the named tuples below keep them as their fields' types.

import contextlib
import json
import os
import sys
from pathlib import Path

from .._ids import is_short_id
from .._tuples import Typed
from .stores import resolved_url

__all__ = ["KernelEntry", "read_kernel_entry", "remove_kernel_entry", "write_kernel_entry"]

# An entry is four short fields: anything longer was not written by a kernel.
_MAX_ENTRY_BYTES = 64 * 1024


# A named tuple, not a dataclass: %load_ext defines it, where a dataclass's generated methods cost a millisecond.
class KernelEntry(Typed):
    """A kernel's registry entry: the run and the store it is attached to, and its process."""

    kernel_id: str
    run_id: str
    store: str
    pid: int


def _runtime_dir() -> Path:
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


def _entry_path(kernel_id: str, runtime_dir: Path | None = None) -> Path:
    return (runtime_dir or _runtime_dir()) / f"durable-nb-kernel-{kernel_id}.json"


def _this_kernel() -> tuple[str, Path] | None:
    """The id a Jupyter server gave the ipykernel this process is, and the folder of its connection
    file (the server's runtime folder); None outside one."""
    # Only look if this process is a kernel already: importing ipykernel here would cost an attach.
    if "ipykernel.kernelapp" not in sys.modules:
        return None
    from ipykernel.kernelapp import IPKernelApp

    if not IPKernelApp.initialized():
        return None
    connection = Path(IPKernelApp.instance().abs_connection_file or "")
    # Jupyter names the file kernel-<id>.json, its ids UUIDs: anything else is not one of its kernels.
    name = connection.name
    found = name[len("kernel-") : -len(".json")]
    if name.startswith("kernel-") and name.endswith(".json") and is_short_id(found):
        return found, connection.parent
    return None


def write_kernel_entry(run_id: str, store_url: str) -> None:
    """Record that this kernel is attached to ``run_id`` in ``store_url`` (atomic, mode 0600); a no-op
    outside a kernel a Jupyter server started."""
    kernel = _this_kernel()
    if kernel is None:
        return
    kernel_id, folder = kernel
    target = _entry_path(kernel_id, folder)
    entry = {"kernel_id": kernel_id, "run_id": run_id, "store": resolved_url(store_url), "pid": os.getpid()}
    target.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # here: only a kernel a Jupyter server started writes an entry

    # mkstemp creates the file 0600; the rename replaces the old entry whole, never half written.
    handle, temporary = tempfile.mkstemp(prefix=".durable-nb-", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(entry, file)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def remove_kernel_entry() -> None:
    """Remove this kernel's entry, if this process wrote it; a no-op outside a Jupyter-started kernel."""
    kernel = _this_kernel()
    if kernel is None:
        return
    kernel_id, folder = kernel
    target = _entry_path(kernel_id, folder)
    # A restarted kernel keeps its id: the entry may be its successor's by now.
    found = read_kernel_entry(kernel_id, pid=os.getpid(), runtime_dir=target.parent)
    if found is not None:
        with contextlib.suppress(FileNotFoundError):
            target.unlink()


def read_kernel_entry(kernel_id: str, pid: int | None = None, runtime_dir: Path | None = None) -> KernelEntry | None:
    """Return the entry of ``kernel_id`` if there is a sound one (written by process ``pid`` when given)."""
    if not is_short_id(kernel_id):
        return None
    path = _entry_path(kernel_id, runtime_dir)
    try:
        with open(path, "rb") as file:
            # Another user's file in the runtime folder is not a kernel of this server's.
            if os.fstat(file.fileno()).st_uid != os.getuid():
                return None
            raw = file.read(_MAX_ENTRY_BYTES + 1)
    except OSError:
        return None
    if len(raw) > _MAX_ENTRY_BYTES:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("kernel_id") != kernel_id:
        return None
    run_id, store, owner = data.get("run_id"), data.get("store"), data.get("pid")
    if not (isinstance(run_id, str) and run_id and isinstance(store, str) and store):
        return None
    if isinstance(owner, bool) or not isinstance(owner, int) or (pid is not None and owner != pid):
        return None
    return KernelEntry(kernel_id, run_id, store, owner)
