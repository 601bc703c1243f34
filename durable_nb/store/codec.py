"""Serialize values into content-addressed blobs and load them back safely.

Plain data (None, bool, int, finite float, str, lists and str-keyed dicts of those) is
stored as JSON, which runs no code on load. Everything else is pickled with cloudpickle,
so functions and classes defined in a notebook survive. A pickled blob's address is the
HMAC-SHA256 of its bytes under the secret key: one pass both names and signs it, and a
blob whose address does not verify is never unpickled.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import pickle
from typing import Any

import cloudpickle

from ..errors import SerializationError, TamperedValueError
from ..model import Blob

__all__ = ["JSON", "PICKLE", "address_hasher", "decode", "encode", "encode_json", "is_plain"]

JSON = "json"
PICKLE = "pickle"
_JSON_PREFIX = "j-"
_PICKLE_PREFIX = "p-"
_MAX_DEPTH = 64


def is_plain(value: Any, depth: int = 0) -> bool:
    """Tell whether JSON round-trips ``value`` exactly (types included)."""
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str:
        return True
    if kind is float:
        return math.isfinite(value)
    if depth >= _MAX_DEPTH:
        return False
    if kind is list:
        return all(is_plain(item, depth + 1) for item in value)
    if kind is dict:
        return all(type(k) is str and is_plain(v, depth + 1) for k, v in value.items())
    return False


def encode_json(value: Any) -> bytes:
    """Return the compact JSON bytes of a plain value."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def encode(value: Any, key: bytes, name: str = "value") -> Blob:
    """Serialize one value into a blob; raise SerializationError naming ``name``."""
    if is_plain(value):
        try:
            data = encode_json(value)
        except ValueError:
            # Lone surrogates and ints beyond the JSON length limit: pickle holds them exactly.
            pass
        else:
            return Blob(_JSON_PREFIX + hashlib.sha256(data).hexdigest(), JSON, data)
    try:
        data = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        type_name = f"{type(value).__module__}.{type(value).__qualname__}"
        raise SerializationError(
            f"Cannot serialize {name!r} of type {type_name}: {exc}. Keep such objects "
            "(open connections, locks, generators) out of durable state: create them "
            "outside the node, or exclude the name.",
            name=name,
            type_name=type_name,
        ) from exc
    digest = hmac.new(key, data, hashlib.sha256).hexdigest()
    return Blob(_PICKLE_PREFIX + digest, PICKLE, data)


def address_hasher(address: str, key: bytes) -> Any:
    """Return a fresh hash object that computes ``address``'s digest from the bytes, or None."""
    if address.startswith(_PICKLE_PREFIX):
        return hmac.new(key, digestmod=hashlib.sha256)
    if address.startswith(_JSON_PREFIX):
        return hashlib.sha256()
    return None


def _digest(blob: Blob, key: bytes) -> str:
    # The digest the store computed while reading, if it used this key; else one pass now.
    if blob.read_digest is not None and hmac.compare_digest(blob.read_digest[0], key):
        return blob.read_digest[1]
    hasher = address_hasher(blob.hash, key)
    hasher.update(blob.data)
    return str(hasher.hexdigest())


def _matches(expected: str, address: str) -> bool:
    # Compare as bytes: compare_digest refuses str holding non-ASCII characters.
    return hmac.compare_digest(expected.encode(), address.encode("utf-8", "surrogatepass"))


def decode(blob: Blob, key: bytes) -> Any:
    """Load a blob's value after checking its address; raise TamperedValueError if it fails."""
    data = blob.data
    if blob.hash.startswith(_PICKLE_PREFIX):
        if not _matches(_digest(blob, key), blob.hash[len(_PICKLE_PREFIX) :]):
            raise TamperedValueError(
                f"Stored value {blob.hash[:14]}… failed its signature check, so it was not "
                "loaded: either the store was modified outside durable_nb, or it was "
                "written with a different secret key. Use the key it was written with "
                "(DURABLE_NB_SECRET or the key file), or fork from an earlier checkpoint."
            )
        return pickle.loads(data)
    if blob.hash.startswith(_JSON_PREFIX):
        if not _matches(_digest(blob, key), blob.hash[len(_JSON_PREFIX) :]):
            raise TamperedValueError(
                f"Stored value {blob.hash[:14]}… does not match its content hash, so it was "
                "not loaded: the store was modified outside durable_nb."
            )
        try:
            return json.loads(data)
        except ValueError as exc:
            raise TamperedValueError(
                f"Stored value {blob.hash[:14]}… is not the JSON its address promises ({exc}); "
                "the store was modified outside durable_nb. Fork from an earlier checkpoint."
            ) from None
    raise TamperedValueError(f"Stored value {blob.hash[:14]}… has an unknown address form.")
