"""Where the kernels durable_nb starts listen: Unix sockets in a folder only this user can enter.

jupyter_client's default is TCP on localhost, which any local user can connect to (the kernel
then warns that it runs over TCP without encryption). With the IPC transport the kernel's five
sockets are files in a fresh folder of mode 0700, removed when the kernel is done. A Unix socket's
path has a hard limit (108 bytes on Linux, 104 on macOS), so the folder is made somewhere short.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import ConfigurationError

__all__ = ["ipc_sockets", "kernel_config"]

# The shortest limit of a Unix socket path (macOS's sun_path), less the name mkdtemp and
# jupyter_client add under the base: "/dnb-XXXXXXXX/kernel-NN".
_BASE_LIMIT = 104 - len("/dnb-XXXXXXXX/kernel-NN") - 1


def _short_base() -> str:
    """A folder to make the sockets' folder in: the temporary folder ($TMPDIR), else /tmp when that is too long."""
    for base in (tempfile.gettempdir(), "/tmp"):
        if len(base) <= _BASE_LIMIT and os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            return base
    raise ConfigurationError(
        "No folder with a short enough path for a kernel's Unix sockets: set TMPDIR to a short writable folder "
        f"(at most {_BASE_LIMIT} characters)."
    )


@contextmanager
def ipc_sockets() -> Iterator[dict[str, Any]]:
    """A kernel manager's transport settings for one kernel: IPC in a private folder, removed on exit.

    Where zmq has no IPC transport (Windows), the settings are empty: the kernel uses TCP on localhost.
    """
    import zmq

    if not zmq.has("ipc"):
        yield {}
        return
    folder = tempfile.mkdtemp(prefix="dnb-", dir=_short_base())  # mode 0700: no other user connects
    try:
        yield {"transport": "ipc", "ip": os.path.join(folder, "kernel")}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def kernel_config(sockets: dict[str, Any]) -> Any:
    """The traitlets configuration that gives the kernel managers nbclient and papermill create these settings."""
    from traitlets.config import Config

    return Config({"KernelManager": dict(sockets)})
