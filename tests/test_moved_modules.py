"""Values stored by earlier versions name engine modules by the paths they had before the engine
was grouped into subpackages; those paths still import, as the same modules."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys

from conftest import env_with_repo

import durable_nb
from durable_nb.engine.moved import MOVED


def test_every_old_path_imports_as_the_module_it_moved_to() -> None:
    """Moved modules: each old path gives the very module object now at its new path."""
    for old, new in MOVED.items():
        assert importlib.import_module(old) is importlib.import_module(new)


def test_a_pickle_naming_an_old_path_loads_in_a_new_interpreter() -> None:
    """Moved modules: a class pickled under its old module path loads as today's class."""
    stored = b"cdurable_nb.engine.workflow\nWorkflow\np0\n."  # as a pickle made before the move holds it
    script = (
        "import pickle, sys, durable_nb\n"
        "from durable_nb.engine.workflows.workflow import Workflow\n"
        "assert pickle.loads(sys.stdin.buffer.read()) is Workflow\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input=stored, capture_output=True, env=env_with_repo(), check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert pickle.loads(stored) is durable_nb.Workflow
