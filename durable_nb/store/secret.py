"""The secret key that signs pickled values: $DURABLE_NB_SECRET, else a per-user key file."""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path

__all__ = ["ENV_SECRET", "key_file_path", "load_secret"]

ENV_SECRET = "DURABLE_NB_SECRET"

_cache: dict[str, bytes] = {}
_lock = threading.Lock()


def key_file_path() -> Path:
    """Return the per-user key file: ``$XDG_CONFIG_HOME/durable_nb/secret.key``."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "durable_nb" / "secret.key"


def load_secret() -> bytes:
    """Return the signing key, creating the key file (mode 0600) on first use."""
    env = os.environ.get(ENV_SECRET)
    if env:
        return env.encode("utf-8")
    path = key_file_path()
    with _lock:
        cached = _cache.get(str(path))
        if cached is not None:
            return cached
        key = _read_or_create(path)
        _cache[str(path)] = key
        return key


def _read_or_create(path: Path) -> bytes:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_hex(32).encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            # link() fails when another process won the race: then its key is the key.
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    key = path.read_bytes().strip()
    if not key:
        raise PermissionError(
            f"The durable_nb key file {path} is empty. Delete it to create a new key "
            f"(values signed with the old key will no longer load) or set {ENV_SECRET}."
        )
    return key
