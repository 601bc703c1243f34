"""What a notebook's cell is called in its run, the same in a kernel (``--all``) and in ``run-notebook``.

In order: the cell's first tag that is a name; the parameters cells for what they are; the
notebook's own cell id (nbformat 4.5 ``id``, sent by the front end with every execution) as
``cell-<id>``, so a cell keeps its name when edited or moved; else its position and a digest of
its source. No IPython here: ``run-notebook`` names a notebook's cells without a kernel.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Iterable

from .._ids import is_short_id

__all__ = [
    "INJECTED_TAG",
    "PARAMETERS_TAG",
    "PLAIN_TAG",
    "cell_name",
    "id_name",
    "is_node_name",
    "positional_name",
    "tag_name",
]

PLAIN_TAG, PARAMETERS_TAG, INJECTED_TAG = "not-durable", "parameters", "injected-parameters"
_FIRST = frozenset(string.ascii_letters + "_")
_NAME_CHARS = _FIRST | frozenset(string.digits + ".-")
_RESERVED_TAGS = {PLAIN_TAG, PARAMETERS_TAG, INJECTED_TAG}


def _is_word(text: str) -> bool:
    """A letter or ``_``, then up to 63 letters, digits, ``_``, ``.`` or ``-`` (ASCII)."""
    return 0 < len(text) <= 64 and text[0] in _FIRST and _NAME_CHARS.issuperset(text)


def tag_name(tags: Iterable[str]) -> str | None:
    """The cell's first tag that is a name, else the parameters cells' own names, else None."""
    tags = [tag for tag in tags if isinstance(tag, str)]
    for tag in tags:
        if tag not in _RESERVED_TAGS and _is_word(tag):
            return tag
    # The parameters cells are named for what they are, so that a fork finds them in another run.
    for tag in (INJECTED_TAG, PARAMETERS_TAG):
        if tag in tags:
            return tag
    return None


def id_name(cell_id: object) -> str | None:
    """``cell-<id>`` for a notebook cell id as nbformat writes them, else None."""
    if isinstance(cell_id, str) and is_short_id(cell_id):  # nbformat 4.5's cell id
        return f"cell-{cell_id}"
    return None


def positional_name(index: int, source: str) -> str:
    """``cell<index>_<6 hex>``: the cell's position and a digest of its source."""
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:6]
    return f"cell{index}_{digest}"


def cell_name(index: int, source: str, tags: Iterable[str], cell_id: object = None) -> str:
    """A cell's name: its tag, else its cell id, else its position and digest."""
    return tag_name(tags) or id_name(cell_id) or positional_name(index, source)


def is_node_name(text: str) -> bool:
    """True for a name a cell can have: a short word (``load``, ``train.v2``, ``cell-3f9a``)."""
    return _is_word(text) or text.replace("-", "_").replace(":", "_").replace("/", "_").isidentifier()
