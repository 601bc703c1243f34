"""The signing key: the per-user key file's checks, the environment, and a mounted secret file."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import durable_nb as dnb
from durable_nb.store import secret
from durable_nb.store.secret import ENV_SECRET, ENV_SECRET_FILE, key_file_path, load_secret

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
ROOT_READS_ANYTHING = "root ignores permission bits, so a mode cannot make the file unreadable"
ROOT_WRITES_ANYWHERE = "root ignores permission bits, so a mode cannot make the folder read-only"
HAND_KEY = "a" * 64


@pytest.fixture(autouse=True)
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh config folder per test, no key in the environment, and an empty key cache."""
    folder = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder))
    monkeypatch.delenv(ENV_SECRET, raising=False)
    monkeypatch.delenv(ENV_SECRET_FILE, raising=False)
    secret._cache.clear()
    yield folder
    secret._cache.clear()


def write_key(path: Path, text: str = HAND_KEY, mode: int = 0o600) -> Path:
    """Write a key file by hand with the given mode (chmod, so the umask does not interfere)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_fresh_key_is_created_private_and_reused(config: Path) -> None:
    key = load_secret()
    path = key_file_path()
    assert path == config / "durable_nb" / "secret.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key) == 64
    secret._cache.clear()  # read it from the file again, not from the cache
    assert load_secret() == key
    assert [p.name for p in path.parent.iterdir()] == ["secret.key"]  # no temp file left behind


def test_hand_written_private_key_is_used() -> None:
    write_key(key_file_path(), HAND_KEY + "\n")
    assert load_secret() == HAND_KEY.encode()


def test_losing_the_creation_race_uses_the_winners_key(monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_key(key_file_path())  # the winner's key, already linked in place
    real_read = secret._read
    calls: list[Path] = []

    def first_sees_no_file(p: Path) -> bytes | None:
        calls.append(p)
        return None if len(calls) == 1 else real_read(p)

    monkeypatch.setattr(secret, "_read", first_sees_no_file)
    assert load_secret() == HAND_KEY.encode()
    assert [p.name for p in path.parent.iterdir()] == ["secret.key"]


def test_environment_wins_over_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    write_key(key_file_path(), mode=0o644)  # a file that would be refused is not even read
    monkeypatch.setenv(ENV_SECRET, "from-the-environment")
    assert load_secret() == b"from-the-environment"


@pytest.mark.parametrize("text", ["", "  \n\t\n"])
def test_empty_key_file(text: str) -> None:
    path = write_key(key_file_path(), text)
    with pytest.raises(dnb.KeyFileError, match="is empty") as caught:
        load_secret()
    assert str(path) in str(caught.value)
    assert ENV_SECRET in str(caught.value)
    assert "delete it to create a new key" in str(caught.value)


def test_key_path_is_a_directory() -> None:
    path = key_file_path()
    path.mkdir(parents=True)
    with pytest.raises(dnb.KeyFileError, match="is a directory") as caught:
        load_secret()
    assert str(path) in str(caught.value)


@pytest.mark.skipif(IS_ROOT, reason=ROOT_READS_ANYTHING)
def test_unreadable_key_file() -> None:
    path = write_key(key_file_path(), mode=0o000)
    try:
        with pytest.raises(dnb.KeyFileError, match="cannot be read") as caught:
            load_secret()
    finally:
        path.chmod(0o600)
    assert f"chmod 600 {path}" in str(caught.value)
    assert isinstance(caught.value.__cause__, PermissionError)


def test_config_folder_under_a_regular_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(blocker / "config"))
    with pytest.raises(dnb.KeyFileError, match="Set XDG_CONFIG_HOME to a folder you can write") as caught:
        load_secret()
    assert str(key_file_path()) in str(caught.value)
    assert isinstance(caught.value.__cause__, NotADirectoryError)


@pytest.mark.skipif(IS_ROOT, reason=ROOT_WRITES_ANYWHERE)
@pytest.mark.parametrize("read_only", ["config", "config/durable_nb"])
def test_read_only_config_folder(config: Path, read_only: str) -> None:
    folder = config.parent / read_only
    folder.mkdir(parents=True)
    folder.chmod(0o500)
    try:
        with pytest.raises(dnb.KeyFileError, match="Set XDG_CONFIG_HOME to a folder you can write") as caught:
            load_secret()
    finally:
        folder.chmod(0o700)
    assert str(key_file_path()) in str(caught.value)
    assert isinstance(caught.value.__cause__, PermissionError)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o666])
def test_key_file_open_to_others_is_refused(mode: int) -> None:
    path = write_key(key_file_path(), mode=mode)
    with pytest.raises(dnb.KeyFileError, match="readable or writable by other users") as caught:
        load_secret()
    message = str(caught.value)
    assert f"chmod 600 {path}" in message
    assert "forge" in message
    path.chmod(0o600)  # the refusal is not cached: once fixed, the key loads
    assert load_secret() == HAND_KEY.encode()


@pytest.mark.parametrize("target_exists", [True, False], ids=["to-a-key", "dangling"])
def test_key_path_that_is_a_symlink_is_refused(tmp_path: Path, target_exists: bool) -> None:
    target = tmp_path / "elsewhere.key"
    if target_exists:
        write_key(target)
    path = key_file_path()
    path.parent.mkdir(parents=True)
    path.symlink_to(target)
    with pytest.raises(dnb.KeyFileError, match="is a symlink") as caught:
        load_secret()
    assert str(path) in str(caught.value)
    assert path.is_symlink()  # nothing was created through the link
    assert target.exists() == target_exists


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="no POSIX user ids on this platform")
def test_key_file_of_another_user_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_key(key_file_path())
    if IS_ROOT:
        os.chown(path, 65534, -1)  # nobody
    else:
        # Only root can give a file away: play another user reading ours instead.
        me = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: me + 1)
    with pytest.raises(dnb.KeyFileError, match="belongs to another user") as caught:
        load_secret()
    assert str(path) in str(caught.value)


def test_key_file_error_is_a_permission_error() -> None:
    write_key(key_file_path(), mode=0o644)
    with pytest.raises(PermissionError):
        load_secret()


# -- a secret file mounted by a container or an orchestrator ----------------------------------------


@pytest.fixture
def mounted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The path $DURABLE_NB_SECRET_FILE names (nothing there yet)."""
    path = tmp_path / "run" / "secrets" / "durable_nb_secret"
    path.parent.mkdir(parents=True)
    monkeypatch.setenv(ENV_SECRET_FILE, str(path))
    return path


@pytest.mark.parametrize("mode", [0o400, 0o444, 0o644])
def test_a_mounted_secret_file_is_the_key_and_no_key_file_is_made(mounted: Path, config: Path, mode: int) -> None:
    """Compose mounts secrets 0444, Kubernetes 0644, owned by a user of the host: the operator's choice."""
    write_key(mounted, HAND_KEY + "\n", mode)
    if IS_ROOT:
        os.chown(mounted, 1000, 1000)  # the host's user who wrote it, not the container's
    assert load_secret() == HAND_KEY.encode()
    assert not config.exists()  # the per-user key file is neither read nor created


def test_a_mounted_secret_behind_symlinks_is_followed(mounted: Path) -> None:
    """Kubernetes mounts a secret as a symlink into a folder it swaps when the secret rotates."""
    data = write_key(mounted.parent / "..2026_12_04" / "durable_nb_secret", HAND_KEY, 0o644)
    (mounted.parent / "..data").symlink_to(data.parent.name)
    mounted.symlink_to(Path("..data") / "durable_nb_secret")
    assert load_secret() == HAND_KEY.encode()


def test_the_key_in_the_environment_and_a_secret_file_together_are_refused(
    mounted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_key(mounted)
    monkeypatch.setenv(ENV_SECRET, "another")
    with pytest.raises(dnb.KeyFileError, match="unset one") as caught:
        load_secret()
    assert ENV_SECRET in str(caught.value) and ENV_SECRET_FILE in str(caught.value)


def test_a_secret_file_that_is_not_there_is_refused(mounted: Path) -> None:
    with pytest.raises(dnb.KeyFileError, match="names no file") as caught:
        load_secret()
    assert str(mounted) in str(caught.value)


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_empty_secret_file_is_refused(mounted: Path, text: str) -> None:
    write_key(mounted, text, 0o444)
    with pytest.raises(dnb.KeyFileError, match="is empty"):
        load_secret()


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_a_secret_file_others_can_write_is_refused(mounted: Path, mode: int) -> None:
    write_key(mounted, mode=mode)
    with pytest.raises(dnb.KeyFileError, match="can be written by other users") as caught:
        load_secret()
    assert f"chmod go-w {mounted}" in str(caught.value)


def test_a_secret_path_that_is_a_folder_is_refused(mounted: Path) -> None:
    mounted.mkdir()
    with pytest.raises(dnb.KeyFileError, match="not a regular file"):
        load_secret()
