"""A %%durable cell's code is cached under the name ipykernel gives it, hashed without its byte-at-a-time loop."""

from __future__ import annotations

import linecache
import random

import pytest
from IPython.core.interactiveshell import InteractiveShell

from durable_nb.notebook import execute

compiler = pytest.importorskip("ipykernel.compiler")


def test_the_hash_is_ipykernels() -> None:
    chooser = random.Random(7)
    for length in range(300):
        text = "".join(chooser.choice("ab€\n x=1é漢\t") for _ in range(length))
        assert execute.murmur2_x86(text, compiler.get_tmp_hash_seed()) == compiler.murmur2_x86(
            text, compiler.get_tmp_hash_seed()
        ), text


def test_a_kernels_cell_is_named_and_cached_as_ipykernel_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Same file name, same lines for tracebacks, same cell number; ipykernel's own hash is not run."""
    source = "total = 0\nfor i in range(10):\n    total += i  # é\n"
    theirs = compiler.XCachingCompiler()
    expected = theirs.cache(source, 7)
    shell = InteractiveShell.instance()
    monkeypatch.setattr(shell, "compile", compiler.XCachingCompiler())
    hashed: list[str] = []
    real = compiler.murmur2_x86
    monkeypatch.setattr(compiler, "murmur2_x86", lambda data, seed: hashed.append(data) or real(data, seed))
    name = execute.cache_cell(shell, source, 7)
    assert name == expected and hashed == []
    assert linecache.getlines(name) == source.splitlines(keepends=True)
    assert shell.compile._filename_map[name] == 7
    assert "get_code_name" not in vars(shell.compile)  # the compiler names as before for the next cell


def test_another_compiler_names_as_it_does() -> None:
    shell = InteractiveShell.instance()
    name = execute.cache_cell(shell, "x = 1\n", 3)
    assert name == shell.compile.get_code_name("x = 1\n", "x = 1\n", 3)
