"""The secret key that signs stored values: $DURABLE_NB_SECRET, else a per-user key file.

The key file is ``$XDG_CONFIG_HOME/durable_nb/secret.key`` (``~/.config/durable_nb/secret.key``
by default), created with mode 0600 on first use. Anyone who can read the key can sign a value
that unpickles as code in your process, and anyone who can write or swap it can make you sign
with their key. So the file is refused, with a :class:`~durable_nb.errors.KeyFileError` that
says what to do, when it:

- is readable or writable by group or others (fix: ``chmod 600 <path>``);
- is a symlink, a directory or anything but a regular file;
- belongs to another user;
- is empty, or cannot be read;

and creating it fails with the same error when its folder cannot be created or written.
$DURABLE_NB_SECRET, when set, is used as is and no file is read.

$DURABLE_NB_SECRET_FILE names a file holding the key, as containers and orchestrators mount
secrets (owned by root or by a user of the host, read-only, mode 0444 or 0644, behind a symlink): it is
followed, and refused only when it is not a regular file, is empty, or can be written by group or
others (then anyone could swap the key). Naming both variables is refused.
"""

from __future__ import annotations

import os
import secrets
import stat
import threading
from pathlib import Path

from ..errors import KeyFileError

__all__ = ["ENV_SECRET", "ENV_SECRET_FILE", "key_file_path", "load_secret"]

ENV_SECRET = "DURABLE_NB_SECRET"
ENV_SECRET_FILE = "DURABLE_NB_SECRET_FILE"

_cache: dict[str, bytes] = {}
_lock = threading.Lock()

# O_NOFOLLOW makes the open itself refuse a symlink, so no one can swap one in between a check
# and the open; O_NONBLOCK keeps a FIFO planted at the path from blocking the open forever.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
# Windows has neither POSIX modes nor uids to check.
_POSIX = os.name == "posix"

_NEW_KEY = "delete it to create a new key (values signed with the old key will no longer load)"


def key_file_path() -> Path:
    """Return the per-user key file: ``$XDG_CONFIG_HOME/durable_nb/secret.key``."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "durable_nb" / "secret.key"


def load_secret() -> bytes:
    """Return the signing key, creating the key file (mode 0600) on first use."""
    env = os.environ.get(ENV_SECRET)
    mounted = os.environ.get(ENV_SECRET_FILE)
    if env and mounted:
        raise KeyFileError(
            f"Both {ENV_SECRET} and {ENV_SECRET_FILE} are set, so which key signs is unclear: unset one."
        )
    if env:
        return env.encode("utf-8")
    path = Path(mounted) if mounted else key_file_path()
    with _lock:
        cached = _cache.get(str(path))
        if cached is not None:
            return cached
        key = _read_mounted(path) if mounted else _read_or_create(path)
        _cache[str(path)] = key
        return key


def _read_mounted(path: Path) -> bytes:
    """Return the key in the file $DURABLE_NB_SECRET_FILE names, after checking no one else can swap it."""
    named = f"{ENV_SECRET_FILE}={path}"
    try:
        # Followed on purpose: orchestrators mount secrets behind symlinks they swap on rotation.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise KeyFileError(f"{named} names no file: mount the secret there, or unset {ENV_SECRET_FILE}.") from None
    except OSError as e:
        raise KeyFileError(f"{named} cannot be opened ({e.strerror}): make it readable by this user.") from e
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"{named} is not a regular file: point it at the file holding the key.")
        # Its owner is not checked: a secret bind-mounted into a container keeps its owner on the
        # host, whom the operator chose; a mode that lets anyone else write is a mistake to refuse.
        mode = stat.S_IMODE(info.st_mode)
        if _POSIX and mode & 0o022:
            raise KeyFileError(
                f"{named} can be written by other users (mode {mode:04o}), who could swap the key: "
                f"run `chmod go-w {path}`."
            )
        key = _read_all(path, fd).strip()
    finally:
        os.close(fd)
    if not key:
        raise KeyFileError(f"{named} is empty: write the key into it (the same one on every process of the store).")
    return key


def _read_or_create(path: Path) -> bytes:
    """Return the key in ``path``, creating the file first when there is none."""
    key = _read(path)
    if key is None:
        _create(path)
        key = _read(path)
    if key is None:
        raise KeyFileError(
            f"The durable_nb key file {path} vanished right after it was created. "
            f"Check what else deletes files in {path.parent}, or set {ENV_SECRET}."
        )
    return key


def _read(path: Path) -> bytes | None:
    """Return the key in ``path`` after checking the file is safe, or None when there is no file."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        # NotADirectoryError: a parent is a file; creating the folder reports that clearly.
        return None
    except OSError as e:
        raise _open_error(path, e) from e
    try:
        # Check the file that is open, not the path, which may have changed since.
        info = os.fstat(fd)
        _check(path, info)
        data = _read_all(path, fd)
    finally:
        os.close(fd)
    key = data.strip()
    if not key:
        raise KeyFileError(f"The durable_nb key file {path} is empty: {_NEW_KEY}, or set {ENV_SECRET}.")
    return key


def _open_error(path: Path, error: OSError) -> KeyFileError:
    """Explain why the key file cannot be opened."""
    # O_NOFOLLOW fails on a symlink with ELOOP (EMLINK on some BSDs): lstat tells which it was.
    if _is_symlink(path):
        return _symlink_error(path)
    if isinstance(error, IsADirectoryError):
        return _directory_error(path)
    if isinstance(error, PermissionError):
        return KeyFileError(
            f"The durable_nb key file {path} cannot be read ({error.strerror}). "
            f"If it is yours, run `chmod 600 {path}`; otherwise {_NEW_KEY}, or set {ENV_SECRET}."
        )
    return KeyFileError(
        f"The durable_nb key file {path} cannot be opened ({error.strerror}): {_NEW_KEY}, or set {ENV_SECRET}."
    )


def _check(path: Path, info: os.stat_result) -> None:
    """Refuse a key file that is not a private regular file of this user."""
    if stat.S_ISDIR(info.st_mode):
        raise _directory_error(path)
    if not stat.S_ISREG(info.st_mode):
        raise KeyFileError(f"The durable_nb key file {path} is not a regular file: {_NEW_KEY}, or set {ENV_SECRET}.")
    if not _POSIX:
        return
    if info.st_uid != os.geteuid():
        # Its owner can read the key and forge values, or change it; a chmod cannot fix that.
        raise KeyFileError(
            f"The durable_nb key file {path} belongs to another user (uid {info.st_uid}), who can read "
            f"or replace the key and so forge stored values that unpickle as code: {_NEW_KEY}, "
            f"or set {ENV_SECRET}."
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise KeyFileError(
            f"The durable_nb key file {path} is readable or writable by other users (mode {mode:04o}); "
            f"anyone who can read it can forge stored values that unpickle as code. "
            f"Run `chmod 600 {path}`, and if others may have read it, {_NEW_KEY}."
        )


def _read_all(path: Path, fd: int) -> bytes:
    """Read the open key file to its end."""
    chunks: list[bytes] = []
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    except OSError as e:
        raise KeyFileError(
            f"The durable_nb key file {path} cannot be read ({e.strerror}): {_NEW_KEY}, or set {ENV_SECRET}."
        ) from e
    return b"".join(chunks)


def _create(path: Path) -> None:
    """Create the key file with a new random key, mode 0600; another process may win the race."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        # A complete file under a private temporary name, so no reader ever sees a partial key.
        tmp = folder / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as e:
        raise _folder_error(path, e) from e
    try:
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
    except OSError as e:
        raise _folder_error(path, e) from e
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def _folder_error(path: Path, error: OSError) -> KeyFileError:
    """Explain why the key file cannot be created in its folder."""
    where = f": {error.filename}" if error.filename else ""
    return KeyFileError(
        f"The durable_nb key file {path} cannot be created ({error.strerror}{where}). "
        f"Set XDG_CONFIG_HOME to a folder you can write, or set {ENV_SECRET}."
    )


def _symlink_error(path: Path) -> KeyFileError:
    """Refuse a key path that is a symlink."""
    return KeyFileError(
        f"The durable_nb key file {path} is a symlink, which is refused: whoever controls its target "
        f"controls the key. Replace it with the file itself (mode 0600), or {_NEW_KEY}, or set {ENV_SECRET}."
    )


def _directory_error(path: Path) -> KeyFileError:
    """Refuse a key path that is a directory."""
    return KeyFileError(
        f"The durable_nb key file {path} is a directory, not a file: remove it to create a new key, "
        f"or set {ENV_SECRET}."
    )


def _is_symlink(path: Path) -> bool:
    """Return whether ``path`` itself is a symlink (lstat: the link, not its target)."""
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False
