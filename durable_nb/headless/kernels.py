"""Where the kernels durable_nb starts listen: Unix sockets in a folder only this user can enter.

jupyter_client's default is TCP on localhost, which any local user can connect to (the kernel
then warns that it runs over TCP without encryption). With the IPC transport the kernel's five
sockets are files in a fresh folder of mode 0700, removed when the kernel is done. A Unix socket's
path has a hard limit (108 bytes on Linux, 104 on macOS), so the folder is made somewhere short.
A process killed before it could remove its folder (the crashes durable_nb is for) leaves it
behind; the next kernel started there removes the folders of processes that are gone.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..engine.runs.ownership import pid_alive
from ..errors import ConfigurationError

__all__ = ["ipc_sockets", "kernel_config"]

# The shortest limit of a Unix socket path (macOS's sun_path), less what goes under the base:
# "/dnb-PID-XXXXXXXX/kernel-NN" with a pid of up to 7 digits (Linux's largest is 4194304).
_BASE_LIMIT = 104 - len("/dnb-4194304-XXXXXXXX/kernel-NN") - 1
_FOLDER = re.compile(r"^dnb-(\d+)-[A-Za-z0-9_]+$")


def _short_base() -> str:
    """A folder to make the sockets' folder in: the temporary folder ($TMPDIR), else /tmp when that is too long."""
    for base in (tempfile.gettempdir(), "/tmp"):
        if len(base) <= _BASE_LIMIT and os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            return base
    raise ConfigurationError(
        "No folder with a short enough path for a kernel's Unix sockets: set TMPDIR to a short writable folder "
        f"(at most {_BASE_LIMIT} characters)."
    )


def _remove_abandoned(base: str) -> None:
    """Remove this user's socket folders under ``base`` whose process is gone (killed before it could)."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for entry in entries:
        found = _FOLDER.match(entry.name)
        try:
            mine = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid()
        except OSError:
            continue
        if found and mine and not pid_alive(int(found.group(1))):
            shutil.rmtree(entry.path, ignore_errors=True)


@contextmanager
def ipc_sockets() -> Iterator[dict[str, Any]]:
    """A kernel manager's transport settings for one kernel: IPC in a private folder, removed on exit.

    Where zmq has no IPC transport (Windows), the settings are empty: the kernel uses TCP on localhost.
    """
    import zmq

    if not zmq.has("ipc"):
        yield {}
        return
    base = _short_base()
    _remove_abandoned(base)
    # Named after this process, so that a later one can tell the folder was abandoned. Mode 0700:
    # no other user can connect to the sockets inside.
    folder = tempfile.mkdtemp(prefix=f"dnb-{os.getpid()}-", dir=base)
    try:
        yield {"transport": "ipc", "ip": os.path.join(folder, "kernel")}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def kernel_config(sockets: dict[str, Any]) -> Any:
    """The traitlets configuration that gives the kernel managers nbclient and papermill create these settings."""
    from traitlets.config import Config

    return Config({"KernelManager": dict(sockets)})
