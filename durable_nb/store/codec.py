"""Serialize values into content-addressed blobs and load them back safely.

Plain data (None, bool, int, finite float, str, lists and str-keyed dicts of those) is
stored as JSON, which runs no code on load. Everything else is pickled with cloudpickle,
so functions and classes defined in a notebook survive. A value's address is the
HMAC-SHA256 of its bytes under the secret key, whatever its codec: one pass both names and
signs it, and a blob whose address does not verify is never loaded (never unpickled, and
never handed on as data someone else wrote).

Stores written before JSON values and lists were signed hold them under their SHA-256
(``j-``, ``l-``). Anyone can compute those, so such a blob loads only with the seal the
schema upgrade gave it under the key; one added to the store since has none and is refused.

A notebook's values are stored in groups: one pickle of the variables that share objects,
whose large array buffers are blobs of their own (raw bytes addressed by their SHA-256, so an
unchanged array is never written twice). A group blob lists its buffers' addresses under its
HMAC, so a buffer edited in the store is refused like a tampered pickle.
"""

# Annotations evaluated, not strings: the named tuples below keep them as their fields' types.

import hashlib
import hmac
import io
import json
import math
import pickle
from collections.abc import Iterable
from typing import Any

import cloudpickle

from .._formulas import data_class, reduce_formula_data
from .._tuples import Typed
from ..errors import SerializationError, TamperedValueError
from ..model import Blob

__all__ = [
    "GROUP",
    "JSON",
    "PICKLE",
    "RAW",
    "RAW_ZSTD",
    "SIGNED_PREFIXES",
    "UNSIGNED_PREFIXES",
    "GroupPart",
    "LIST",
    "ListChunk",
    "OpenGroup",
    "address_hasher",
    "check_write",
    "decode",
    "encode",
    "encode_group",
    "encode_json",
    "encode_raw",
    "encode_typed",
    "encode_list",
    "flat_dispatch_table",
    "write_mac",
    "write_macs",
    "is_group",
    "is_json",
    "is_list",
    "open_list",
    "is_plain",
    "open_group",
    "open_raw",
    "raw_address",
    "seal",
    "signed_with",
]

JSON = "json"
PICKLE = "pickle"
RAW = "raw"
RAW_ZSTD = "raw-zstd"
GROUP = "group"
LIST = "list"
# Array buffers of this size or more are tried for compression; kept compressed only when a
# sample shrinks to this fraction of its size or less.
_COMPRESS_FROM = 64 << 10
_SAMPLE = 32 << 10
_COMPRESS_RATIO = 0.8
_JSON_PREFIX = "js-"
_PICKLE_PREFIX = "p-"
_RAW_PREFIX = "r-"
_GROUP_PREFIX = "g-"
_LIST_PREFIX = "ls-"
# JSON values and lists as stores wrote them before they were signed: addressed by their SHA-256.
_UNSIGNED_JSON_PREFIX = "j-"
_UNSIGNED_LIST_PREFIX = "l-"
UNSIGNED_PREFIXES = (_UNSIGNED_JSON_PREFIX, _UNSIGNED_LIST_PREFIX)
# Addresses that are the HMAC of the bytes under the key.
SIGNED_PREFIXES = (_PICKLE_PREFIX, _GROUP_PREFIX, _JSON_PREFIX, _LIST_PREFIX)
# What a seal signs besides the address, so that no other signature made with the key can pass for one.
_SEAL_CONTEXT = b"durable_nb seal of an unsigned address\0"
_GROUP_MAGIC = b"DNBG"
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


# What json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False) builds on each
# call (an encoder holds no state between calls): one, for every value of every node.
_JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode_json(value: Any) -> bytes:
    """Return the compact JSON bytes of a plain value."""
    return _JSON_ENCODER.encode(value).encode()


# Files in memory pickle as what they hold, which is what they are.
_IN_MEMORY = (io.StringIO, io.BytesIO)


def is_file_type(kind: type) -> bool:
    """Whether instances of ``kind`` are open files ``refuse_open_file`` refuses (a pickler asks once per type)."""
    return issubclass(kind, io.IOBase) and not issubclass(kind, _IN_MEMORY)


def refuse_open_file(obj: Any) -> None:
    """Raise PicklingError for an open file: pickled, it would come back as a copy of its text."""
    if isinstance(obj, io.IOBase) and not isinstance(obj, _IN_MEMORY):
        raise pickle.PicklingError(
            f"{type(obj).__name__} {getattr(obj, 'name', '')!r} is an open file; a restore could not reopen "
            "it (it would come back as a copy of what it held). Store its path or its contents instead"
        )


def flat_dispatch_table() -> dict[type, Any]:
    """cloudpickle's table of reducers by type, as one dict, the way it resolves a type (its own first).

    cloudpickle keeps it as a ChainMap over copyreg's, which the C pickler asks through Python for
    every object it pickles by reducing it, most often to miss (a KeyError raised and caught): a
    figure's thousands of artists paid about a tenth of their pickle for it. Made for each pickler,
    so that what a library registers with copyreg later counts, as it does in the ChainMap.
    """
    table = cloudpickle.Pickler.dispatch_table
    flat: dict[type, Any] = {}
    for layer in reversed(getattr(table, "maps", [table])):
        flat.update(layer)
    return flat


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, refusing open files; a statsmodels formula model keeps its formula's names."""

    def __init__(self, file: io.BytesIO, protocol: int) -> None:
        self.dispatch_table = flat_dispatch_table()  # read by the C pickler as it is made
        super().__init__(file, protocol=protocol)
        self._model_data = data_class()

    def reducer_override(self, obj: Any) -> Any:
        refuse_open_file(obj)
        if self._model_data is not None and issubclass(type(obj), self._model_data):
            reduced = reduce_formula_data(obj)
            if reduced is not None:
                return reduced
        return super().reducer_override(obj)


def _pickle(value: Any) -> bytes:
    if type(value) is tuple and all(type(item) is str or type(item) is bytes for item in value):
        # A serializer's (type, bytes), as LangGraph's values come: the same bytes as the
        # pickler below makes, without building one per value.
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return out.getvalue()


def encode(value: Any, key: bytes, name: str = "value") -> Blob:
    """Serialize one value into a blob; raise SerializationError naming ``name``."""
    if is_plain(value):
        try:
            data = encode_json(value)
        except ValueError:
            # Lone surrogates and ints beyond the JSON length limit: pickle holds them exactly.
            pass
        else:
            return Blob(_JSON_PREFIX + _sign(key, data), JSON, data)
    try:
        data = _pickle(value)
    except Exception as exc:
        type_name = f"{type(value).__module__}.{type(value).__qualname__}"
        raise SerializationError(
            f"Cannot serialize {name!r} of type {type_name}: {exc}. Keep such objects "
            "(open connections, locks, generators) out of durable state: create them "
            "outside the node, or exclude the name.",
            name=name,
            type_name=type_name,
        ) from exc
    return Blob(_PICKLE_PREFIX + _sign(key, data), PICKLE, data)


def encode_typed(typed: tuple[str, bytes], key: bytes) -> Blob:
    """Return the blob ``encode`` makes of a serializer's (type name, bytes), without its checks:
    the caller knows ``typed`` is such a pair (LangGraph's values are)."""
    data = pickle.dumps(typed, protocol=pickle.HIGHEST_PROTOCOL)
    return Blob(_PICKLE_PREFIX + _sign(key, data), PICKLE, data)


# A keyed HMAC-SHA256 per key, copied for each value: a copy skips the key's setup, which is most
# of the cost of a one-shot HMAC over the few hundred bytes of a small state's value (about 1.0
# against 1.35 µs). The standard library's HMAC, not one laid out by hand over hashlib's states:
# that would save about 0.3 µs a signature, a few a step, for a second implementation of a
# primitive to keep right. The originals are never updated, so threads may copy them at once.
_keyed: dict[bytes, hmac.HMAC] = {}
_KEYS_KEPT = 16


def _keyed_hmac(key: bytes) -> hmac.HMAC:
    keyed = _keyed.get(key)
    if keyed is None:
        if len(_keyed) >= _KEYS_KEPT:  # a process signs with a key or two; tests with many
            _keyed.clear()
        keyed = _keyed[key] = hmac.new(key, digestmod="sha256")
    return keyed


def _sign(key: bytes, data: Any) -> str:
    # The lookup written out here: every value and every stored write's check signs.
    signer = (_keyed.get(key) or _keyed_hmac(key)).copy()
    signer.update(data)
    return signer.hexdigest()


def seal(address: str, key: bytes) -> str:
    """Return the seal that lets a value stored under an unsigned address (``j-``, ``l-``) load.

    The address is the SHA-256 of the value's bytes, which loading checks; the seal signs the
    address, so it vouches for those bytes without reading them.
    """
    return _sign(key, _SEAL_CONTEXT + address.encode("utf-8", "surrogatepass"))


_WRITE_CONTEXT = "durable_nb pending write\0"


def write_mac(key: bytes, checkpoint_id: str, task_id: str, idx: int, channel: str, task_path: str, value: str) -> str:
    """Return the signature of a pending write's fields (its value's address among them) under ``key``."""
    return write_macs(key, checkpoint_id, task_id, task_path, ((idx, channel, value),))[0]


def _task_layout(checkpoint_id: str, task_id: str, task_path: str) -> tuple[str, str]:
    """Return the fields a task's writes at a checkpoint share, laid out: what goes before a write's
    own (idx, channel) and what goes between those and its value's address."""
    # Each text field after its length: no two different rows sign the same bytes.
    return (
        f"{_WRITE_CONTEXT}{len(checkpoint_id)}:{checkpoint_id}{len(task_id)}:{task_id}",
        f"{len(task_path)}:{task_path}",
    )


def _write_layout(head: str, path: str, idx: int, channel: str, value: str) -> bytes:
    """Return the bytes a write's signature covers, after its task's shared fields (``_task_layout``)."""
    return f"{head}{idx}:{len(channel)}:{channel}{path}{value}".encode("utf-8", "surrogatepass")


def write_macs(
    key: bytes, checkpoint_id: str, task_id: str, task_path: str, writes: Iterable[tuple[int, str, str]]
) -> list[str]:
    """Return ``write_mac`` of each (idx, channel, value address) of a task's writes at a checkpoint:
    the fields they share are laid out once (a step's writes are signed on its path)."""
    head, path = _task_layout(checkpoint_id, task_id, task_path)
    return [_sign(key, _write_layout(head, path, idx, channel, value)) for idx, channel, value in writes]


def check_write(
    key: bytes, mac: str, checkpoint_id: str, task_id: str, idx: int, channel: str, task_path: str, value: str
) -> None:
    """Raise TamperedValueError unless ``mac`` signs the pending write's fields under ``key``."""
    check_writes(key, ((checkpoint_id, task_id, idx, channel, task_path, value, 0, mac),))


def check_writes(key: bytes, writes: Iterable[tuple[str, str, int, str, str, str, int, str]]) -> None:
    """Raise TamperedValueError unless each stored write (a WriteRow: checkpoint id, task id, idx,
    channel, task path, value address, stamp, mac) is signed by its mac under ``key``."""
    # A task's writes follow each other as stored: the fields they share are laid out once (a
    # listing checks every write it loads).
    shared: tuple[str, str, str] | None = None
    head = path = ""
    for checkpoint_id, task_id, idx, channel, task_path, value, _, mac in writes:
        if shared != (checkpoint_id, task_id, task_path):
            shared = (checkpoint_id, task_id, task_path)
            head, path = _task_layout(checkpoint_id, task_id, task_path)
        expected = _sign(key, _write_layout(head, path, idx, channel, value))
        if not hmac.compare_digest(expected, mac):
            raise TamperedValueError(
                f"A stored pending write of task {task_id!r} at checkpoint {checkpoint_id} failed its "
                "signature check, so it was not loaded: either the store was modified outside durable_nb, "
                "or it was written with a different secret key. Use the key it was written with "
                "(DURABLE_NB_SECRET or the key file), or go on from another checkpoint."
            )


def raw_address(data: Any) -> str:
    """Return the address of raw bytes (anything with the buffer protocol): its SHA-256."""
    return _RAW_PREFIX + hashlib.sha256(data).hexdigest()


def _worth_compressing(view: memoryview) -> bool:
    # Two samples tell whether the bytes compress: random floats barely do (about 0.94 of
    # their size, not worth the time), small integers and repeated values by ten times.
    if len(view) < _COMPRESS_FROM:
        return False
    middle = len(view) // 2
    sample = bytes(view[:_SAMPLE]) + bytes(view[middle : middle + _SAMPLE])
    return len(_compressor().compress(sample)) <= _COMPRESS_RATIO * len(sample)


def encode_raw(data: Any, address: str | None = None) -> Blob:
    """Make the blob of raw bytes (an array's buffer): as they are (not copied), or compressed
    with zstd when a sample shows that pays; the address is always that of the raw bytes."""
    view = memoryview(data).cast("B")
    address = address or raw_address(view)
    if _worth_compressing(view):
        return Blob(address, RAW_ZSTD, _compressor().compress(view))
    return Blob(address, RAW, view)  # type: ignore[arg-type]


def _compressor() -> Any:
    import zstandard

    return zstandard.ZstdCompressor(level=1)


class GroupPart(Typed):
    """One out-of-band buffer of a group: its address and whether the array was read-only."""

    address: str
    readonly: bool


class OpenGroup(Typed):
    """A verified group blob: the names it holds, its buffers in order, and its pickle stream."""

    names: list[str]
    parts: list[GroupPart]
    stream: memoryview


def encode_group(names: list[str], parts: list[GroupPart], stream: bytes, key: bytes) -> Blob:
    """Build the blob of a group of variables pickled together, signed with ``key``."""
    header = encode_json({"names": names, "parts": [[p.address, p.readonly] for p in parts]})
    data = b"".join((_GROUP_MAGIC, len(header).to_bytes(4, "big"), header, stream))
    return Blob(_GROUP_PREFIX + _sign(key, data), GROUP, data, parts=tuple(dict.fromkeys(p.address for p in parts)))


def is_json(address: str) -> bool:
    """Tell whether an address names a plain JSON value (decoding it runs no code)."""
    return address.startswith((_JSON_PREFIX, _UNSIGNED_JSON_PREFIX))


def is_group(address: str) -> bool:
    """Tell whether an address names a group of variables."""
    return address.startswith(_GROUP_PREFIX)


def _tampered(address: str) -> TamperedValueError:
    return TamperedValueError(
        f"Stored value {address[:14]}… failed its signature check, so it was not "
        "loaded: either the store was modified outside durable_nb, or it was "
        "written with a different secret key. Use the key it was written with "
        "(DURABLE_NB_SECRET or the key file), or fork from an earlier checkpoint."
    )


def open_group(blob: Blob, key: bytes) -> OpenGroup:
    """Check a group blob's signature and split it into names, parts and stream."""
    if not is_group(blob.hash) or not signed_with(blob, key):
        raise _tampered(blob.hash)
    view = memoryview(blob.data)
    if bytes(view[:4]) != _GROUP_MAGIC:
        raise TamperedValueError(f"Stored value {blob.hash[:14]}… is not a group of variables.")
    length = int.from_bytes(view[4:8], "big")
    header = json.loads(bytes(view[8 : 8 + length]))
    parts = [GroupPart(str(address), bool(readonly)) for address, readonly in header["parts"]]
    return OpenGroup([str(n) for n in header["names"]], parts, view[8 + length :])


def open_raw(blob: Blob) -> Any:
    """Return a raw blob's bytes (decompressed), raising TamperedValueError unless they match its address."""
    data: Any = blob.data
    digest = blob.read_digest[1] if blob.read_digest is not None and blob.codec == RAW else None
    if blob.codec == RAW_ZSTD:
        import zstandard

        try:
            data = zstandard.ZstdDecompressor().decompress(data)
        except zstandard.ZstdError:
            data = b""  # not zstd data: the check below reports it
    if digest is None:
        digest = hashlib.sha256(data).hexdigest()
    if not _matches(digest, blob.hash[len(_RAW_PREFIX) :]):
        raise TamperedValueError(
            f"Stored array data {blob.hash[:14]}… does not match its content hash, so it was not "
            "loaded: the store was modified outside durable_nb. Fork from an earlier checkpoint."
        )
    return data


class ListChunk(Typed):
    """A run of a stored list: a stored list of ``count`` items, or (``single``) one stored item."""

    address: str
    count: int
    single: bool = False


def encode_list(chunks: list[ListChunk], key: bytes) -> Blob:
    """Build the blob of a list stored in chunks: the chunks' addresses and lengths, in order, signed with ``key``.

    A list that grows by appending is stored as its earlier chunks plus a new one, never again
    whole; a map's results are its items, stored as they finished, assembled when read.
    """
    data = encode_json([[c.address, c.count, 1 if c.single else 0] for c in chunks])
    return Blob(_LIST_PREFIX + _sign(key, data), LIST, data, parts=tuple(c.address for c in chunks))


def is_list(address: str) -> bool:
    """Tell whether an address names a list stored in chunks."""
    return address.startswith((_LIST_PREFIX, _UNSIGNED_LIST_PREFIX))


def open_list(blob: Blob, key: bytes) -> list[ListChunk]:
    """Check a list blob's signature and return its chunks."""
    _verify(blob, key, _LIST_PREFIX, _UNSIGNED_LIST_PREFIX, "list")
    return [ListChunk(str(a), int(n), bool(single)) for a, n, single in json.loads(bytes(blob.data))]


# The address forms whose digest is the HMAC of the bytes with the store's key.
_SIGNED_FORMS = (_PICKLE_PREFIX, _GROUP_PREFIX, _JSON_PREFIX, _LIST_PREFIX)


def address_hasher(address: str, key: bytes) -> Any:
    """Return a fresh hash object that computes ``address``'s digest from the bytes, or None."""
    if address.startswith(_SIGNED_FORMS):
        return hmac.new(key, digestmod=hashlib.sha256)
    if address.startswith((_RAW_PREFIX, *UNSIGNED_PREFIXES)):
        return hashlib.sha256()
    return None


def _digest(blob: Blob, key: bytes) -> str:
    # The digest the store computed while reading, if it used this key; else one pass now.
    if blob.read_digest is not None and hmac.compare_digest(blob.read_digest[0], key):
        return blob.read_digest[1]
    if blob.hash.startswith(_SIGNED_FORMS):
        return _sign(key, blob.data)
    hasher = address_hasher(blob.hash, key)
    hasher.update(blob.data)
    return str(hasher.hexdigest())


def _matches(expected: str, address: str) -> bool:
    # Compare as bytes: compare_digest refuses str holding non-ASCII characters.
    return hmac.compare_digest(expected.encode(), address.encode("utf-8", "surrogatepass"))


def signed_with(blob: Blob, key: bytes) -> bool:
    """Tell whether ``key`` signed a blob whose address is the HMAC of its bytes."""
    address = blob.hash
    for prefix in SIGNED_PREFIXES:
        if address.startswith(prefix):
            # The common case (a value read from the database) is one HMAC: listing a long thread
            # checks tens of thousands of small values.
            if blob.read_digest is not None:
                return _matches(_digest(blob, key), address[len(prefix) :])
            try:
                stated = bytes.fromhex(address[len(prefix) :])
            except ValueError:
                return False  # not hex: no digest of ours
            return hmac.compare_digest(hmac.digest(key, blob.data, "sha256"), stated)
    return False


def _verify(blob: Blob, key: bytes, signed: str, unsigned: str, what: str) -> None:
    """Check a blob's signed address, or its unsigned address and seal; raise TamperedValueError."""
    address = blob.hash
    if address.startswith(signed):
        if not signed_with(blob, key):
            raise _tampered(address)
        return
    if not address.startswith(unsigned):
        raise TamperedValueError(f"Stored value {address[:14]}… is not a {what}: its address has another form.")
    if blob.seal is None or not _matches(seal(address, key), blob.seal):
        raise TamperedValueError(
            f"Stored {what} {address[:14]}… has an unsigned address and no valid seal, so it was not "
            "loaded: it was added to the store outside durable_nb (values stored before signing were "
            "sealed when the store was upgraded), or sealed with a different secret key. Use the key "
            "the store was upgraded with (DURABLE_NB_SECRET or the key file), or fork from an earlier checkpoint."
        )
    if not _matches(_digest(blob, key), address[len(unsigned) :]):
        raise TamperedValueError(
            f"Stored {what} {address[:14]}… does not match its content hash, so it was not loaded: "
            "the store was modified outside durable_nb. Fork from an earlier checkpoint."
        )


def decode(blob: Blob, key: bytes) -> Any:
    """Load a blob's value after checking its address; raise TamperedValueError if it fails."""
    data = blob.data
    if blob.hash.startswith(_PICKLE_PREFIX):
        if not signed_with(blob, key):
            raise _tampered(blob.hash)
        return pickle.loads(data)
    if blob.hash.startswith((_JSON_PREFIX, _UNSIGNED_JSON_PREFIX)):
        _verify(blob, key, _JSON_PREFIX, _UNSIGNED_JSON_PREFIX, "value")
        try:
            # Written as UTF-8 (encode_json): decoded as such, without json's guess at the encoding.
            return json.loads(str(data, "utf-8"))
        except ValueError as exc:
            raise TamperedValueError(
                f"Stored value {blob.hash[:14]}… is not the JSON its address promises ({exc}); "
                "the store was modified outside durable_nb. Fork from an earlier checkpoint."
            ) from None
    raise TamperedValueError(f"Stored value {blob.hash[:14]}… has an unknown address form.")
