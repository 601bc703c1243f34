"""What someone with write access to a store's database, but not the secret key, can do: add a
value under an address anyone can compute, and point a checkpoint at it."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from conftest import execute_sql


def compact(value: Any) -> bytes:
    """Return the JSON bytes durable_nb stores for a plain value."""
    return json.dumps(value, separators=(",", ":")).encode()


def forge_blob(url: str, data: bytes, prefix: str = "j-", codec: str = "json", parts: list[str] | None = None) -> str:
    """Insert ``data`` under ``prefix`` + its SHA-256, as an outsider can; return the address."""
    address = prefix + hashlib.sha256(data).hexdigest()
    execute_sql(
        url,
        "INSERT INTO blobs (hash, codec, size, created_at, data, parts) VALUES (?, ?, ?, ?, ?, ?)",
        (address, codec, len(data), 0.0, data, None if parts is None else json.dumps(parts)),
    )
    return address


def forge_json(url: str, value: Any, prefix: str = "j-") -> str:
    """Insert a plain value as JSON under its SHA-256; return its address."""
    return forge_blob(url, compact(value), prefix)


def point_head_at(url: str, run_id: str, name: str, address: str) -> None:
    """Make the latest checkpoint of a run say that ``name`` now holds the value at ``address``."""
    ((seq, changes, snapshot),) = execute_sql(
        url, "SELECT seq, changes, snapshot FROM checkpoints WHERE run_id = ? ORDER BY seq DESC LIMIT 1", (run_id,)
    )
    changes = {**json.loads(changes), name: address}
    execute_sql(
        url, "UPDATE checkpoints SET changes = ? WHERE run_id = ? AND seq = ?", (json.dumps(changes), run_id, seq)
    )
    if snapshot is not None:
        whole = json.loads(snapshot)
        whole["manifest"][name] = address
        execute_sql(
            url, "UPDATE checkpoints SET snapshot = ? WHERE run_id = ? AND seq = ?", (json.dumps(whole), run_id, seq)
        )
