"""What the analysis of a cell's code finds: the names it uses and the definitions it keeps."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import json.decoder
import sys
import typing

import pytest

from durable_nb.notebook.cellcode import analyze

REBOUND = [
    "f = 2",
    "for f in []:\n    pass",
    "import os as f",
    "(f := 3)",
    "del f",
    "try:\n    pass\nexcept ValueError as f:\n    pass",
    "match 1:\n    case f:\n        pass",
    "class f:\n    pass",
    "\uff46 = 1",  # a full-width f: the parser reads it as f
    "x = 1; f = 2",
]


@pytest.mark.parametrize("after", REBOUND)
def test_a_definition_bound_again_later_in_the_cell_is_not_kept(after: str) -> None:
    """A name a later statement binds (in any way the parser allows) loses its definition."""
    code = analyze(f"def f():\n    return 1\n{after}")
    assert "f" not in code.definitions or after.startswith("class"), after
    if after.startswith("class"):
        assert code.definitions["f"].source.startswith("class")


@pytest.mark.parametrize("after", ["y = f()", "print('f = 2')", "g = [f for _ in range(2)]", "def g():\n    f = 2"])
def test_a_definition_only_used_later_is_kept(after: str) -> None:
    """Calling it, text naming it, a comprehension over it, a local of another function: it is kept."""
    code = analyze(f"def f():\n    return 1\n{after}")
    assert code.definitions["f"].source == "def f():\n    return 1\n"


def test_the_names_a_cell_uses_are_its_name_nodes() -> None:
    """Loads, stores and deletions, in any scope; attributes and keywords are not names."""
    code = analyze("import numpy as np\nx = np.zeros(3)\ndef g(a):\n    return a + y\ndel x\nz = [w for w in x]")
    assert {"np", "x", "a", "y", "z", "w"} <= code.names
    assert not {"zeros", "numpy", "g"} & code.names


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="ast.dump leaves out empty fields from Python 3.13 on")
@pytest.mark.parametrize("module", [ast, json.decoder, dataclasses, typing])
def test_a_cells_source_hash_is_that_of_its_tree_as_ast_dump_writes_it(module: object) -> None:
    """Cells stored before the hash was made by its own dump keep their names: the text is ast.dump's."""
    source = inspect.getsource(module)  # type: ignore[arg-type]
    assert analyze(source).source_hash == hashlib.sha256(ast.dump(ast.parse(source)).encode()).hexdigest()
