"""How each SQL backend spells what differs: placeholders, a JSON path in ``extra``, transactions.

Its own module: a store names its dialect when it is defined (attaching a kernel), while the
operations that use it on many rows at once are imported on first use.
"""

# Annotations evaluated, not strings: the named tuples below keep them as their fields' types.

import json
from collections.abc import Sequence

from .._tuples import Typed

__all__ = ["POSTGRES", "SQLITE", "Dialect"]


class Dialect(Typed):
    """How one backend spells what differs: placeholders, a JSON path in ``extra``, transactions."""

    p: str
    sqlite: bool

    def extra_at(self) -> str:
        """The SQL text of a value inside a checkpoint's ``extra`` JSON, as text; its path is
        the parameter ``path_parameter`` gives."""
        if self.sqlite:
            return f"json_extract(extra, {self.p})"
        return f"(extra::json #>> CAST({self.p} AS text[]))"

    def path_parameter(self, path: Sequence[str]) -> str:
        """The parameter that names ``path`` for ``extra_at``."""
        if self.sqlite:
            return "$." + ".".join(json.dumps(key) for key in path)
        return "{" + ",".join(path) + "}"


SQLITE = Dialect("?", True)
POSTGRES = Dialect("%s", False)
