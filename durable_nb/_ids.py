"""Identifiers: time-sortable UUIDv7 ids and this process's owner token."""

from __future__ import annotations

import os
import secrets
import socket
import string
import threading
import time

__all__ = ["host_name", "is_short_id", "new_id", "owner_token", "parse_owner", "process_token"]

# What a notebook cell id (nbformat 4.5) and a Jupyter kernel id are made of.
_ID_CHARS = frozenset(string.ascii_letters + string.digits + "_-")


def is_short_id(text: str) -> bool:
    """True for 1 to 64 ASCII letters, digits, ``_`` and ``-`` (a cell's or a kernel's id).

    Checked with a set, not a regular expression: compiling one costs an attaching kernel more
    than a thousand Python calls."""
    return 0 < len(text) <= 64 and _ID_CHARS.issuperset(text)


_lock = threading.Lock()
_last_ms = 0
_counter = 0
# Random bytes drawn from the system a few ids' worth at a time: one system call per 64 ids
# instead of two per id. A forked child draws its own (it must not repeat its parent's ids).
_RANDOM_BATCH = 640
_random = b""
_random_at = 0


def _forget_random() -> None:
    global _random, _random_at
    _random, _random_at = b"", 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_random)


def new_id() -> str:
    """Return a UUIDv7 string: ids sort by creation time, also within one millisecond."""
    global _last_ms, _counter, _random, _random_at
    with _lock:
        if _random_at + 10 > len(_random):
            _random, _random_at = os.urandom(_RANDOM_BATCH), 0
        drawn = _random[_random_at : _random_at + 10]
        _random_at += 10
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            # Same (or earlier, after a clock step) millisecond: keep order with a counter.
            ms = _last_ms
            _counter += 1
        else:
            _counter = int.from_bytes(drawn[:2], "big") >> 5  # 11 random bits
        if _counter >= 1 << 12:
            ms += 1
            _counter = 0
        _last_ms = ms
        counter = _counter
    rand_b = int.from_bytes(drawn[2:], "big") >> 2  # 62 random bits, as secrets would draw them
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= rand_b
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


_process_token = secrets.token_hex(6)
_token_pid = os.getpid()


def process_token() -> str:
    """Return a token unique to this process, renewed after fork()."""
    global _process_token, _token_pid
    if os.getpid() != _token_pid:
        _process_token = secrets.token_hex(6)
        _token_pid = os.getpid()
    return _process_token


def host_name() -> str:
    """Return this machine's name for ownership: $DURABLE_NB_HOST, else the hostname.

    Set DURABLE_NB_HOST where hostnames repeat across machines or containers (a pid is only
    meaningful on the machine that issued it).
    """
    return os.environ.get("DURABLE_NB_HOST") or socket.gethostname()


def owner_token() -> str:
    """Return ``host:pid:token``, naming this process as a run's owner."""
    return f"{host_name()}:{os.getpid()}:{process_token()}"


def parse_owner(owner: str) -> tuple[str, int, str]:
    """Split an owner token into host, pid and process token."""
    host, pid, token = owner.rsplit(":", 2)
    return host, int(pid), token
