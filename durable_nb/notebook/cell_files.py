"""The file name a cell's code is cached under (what its tracebacks and the debugger show), made cheaply.

In a kernel, ipykernel names a cell's code after a murmur2 hash of it, computed in Python one byte
at a time: about 0.2 ms per kilobyte, which a %%durable cell paid a second time for its body. The
same hash, over four bytes a step, gives the same name for a third of that.
"""

from __future__ import annotations

import os
import struct
import sys
from typing import Any

__all__ = ["cache_cell", "murmur2_x86"]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2_x86(text: str, seed: int) -> int:
    """Return ipykernel's murmur2 hash of ``text`` (its UTF-8 bytes), the one its cell file names carry."""
    data = text.encode("utf8")
    length = len(data)
    h = seed ^ length
    rounded = length & ~3
    for k in struct.unpack(f"<{rounded >> 2}I", data[:rounded]):
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ (((k ^ (k >> 24)) * _M) & _MASK)
    tail = data[rounded:]
    if tail:
        h = ((h ^ int.from_bytes(tail, "little")) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def _kernel_name(compiler: Any, source: str) -> str | None:
    """The name ipykernel's compiler gives ``source``, if it is that compiler naming as it does by default."""
    kernel = sys.modules.get("ipykernel.compiler")
    if kernel is None or getattr(type(compiler), "get_code_name", None) is not kernel.XCachingCompiler.get_code_name:
        return None
    if os.environ.get("IPYKERNEL_CELL_NAME") is not None:
        return None  # named as that says, without a hash
    return f"{kernel.get_tmp_directory()}{os.sep}{murmur2_x86(source, kernel.get_tmp_hash_seed())}.py"


def cache_cell(shell: Any, source: str, number: int) -> str:
    """Cache ``source`` in the shell's compiler as cell ``number`` and return its file name."""
    compiler = shell.compile
    name = _kernel_name(compiler, source)
    if name is None:
        return str(compiler.cache(source, number))
    # The compiler's own caching, given the name it would make: for this one call, on this thread.
    compiler.get_code_name = lambda raw_code, code, number: name
    try:
        return str(compiler.cache(source, number))
    finally:
        del compiler.get_code_name
