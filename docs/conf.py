"""Sphinx configuration of durable_nb's documentation.

Built with ``python -m sphinx -W -n -b html docs docs/_build/html`` (warnings are errors, references checked).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

# The notebooks executed at build time (and the kernels they start) work on a store in a temporary
# folder, never on one in the reader's working directory, with a key made for this build.
_scratch = Path(tempfile.mkdtemp(prefix="durable-nb-docs-"))
os.environ["DURABLE_NB_STORE"] = f"sqlite:///{_scratch / 'runs.db'}"
os.environ.setdefault("DURABLE_NB_SECRET", "docs-build-secret-not-for-real-stores")
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))

import durable_nb  # noqa: E402

project = "durable_nb"
author = "durable_nb maintainers"
copyright = "durable_nb maintainers"
release = version = durable_nb.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinxarg.ext",
    "durable_docs",
]

exclude_patterns = ["_build", "refresh-screenshots", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
root_doc = "index"

# Internal references are checked: a link to a page, a heading or a Python name that does not exist
# fails the build (with -W). Names of other projects are not linked (the build needs no network):
# the ones below are types of other libraries that appear in signatures.
nitpicky = True
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(pandas|pd|np|numpy|httpx|fastapi|starlette|openai|anthropic|langgraph|langchain_core|distributed|concurrent|asyncio|collections|typing|datetime|pathlib|types|enum|_?typeshed|IPython|ipywidgets|traitlets)(\..*)?",
    ),
    (
        r"py:.*",
        r"(T|R|P|Any|Callable|Awaitable|Iterable|Iterator|AsyncIterator|Mapping|Sequence|Literal|Self|TypeVar|ParamSpec|Coroutine|NoneType|Path|timedelta|datetime|DataFrame|Executor|Client)",
    ),
    (r"py:.*", r"durable_nb\..*\._.*"),
    # The store protocol's records and the engine's internal types appear in signatures but are not
    # public names: they are shown, not linked.
    (r"py:.*", r"durable_nb\.(model|engine|store)\..*"),
    (r"py:.*", r"(PendingInterrupt|RunRecord|CheckpointRecord|ScheduleRecord|StatusRows|EventRecord|Figures|Sleep|F|GraphDefinition)"),
    (r"py:.*", r"(os|json|sqlite3|psycopg|psycopg_pool)(\..*)?"),
]
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}

# MyST: headings get anchors so that pages can link to sections; colon fences for admonitions.
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]
myst_heading_anchors = 3

# MyST-NB: every notebook page runs at build time, so every example in it runs; an error fails the build.
nb_execution_mode = "force"
nb_execution_timeout = 120
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True

# Quotes and ellipses only: "--store" in a command's help must not become an en dash.
smartquotes_action = "qe"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# Attributes: sections become fields of the class, not entries that clash with autodoc's own for a dataclass.
napoleon_use_ivar = True

html_theme = "pydata_sphinx_theme"
html_title = "durable_nb"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "icon_links": [],
}
html_static_path: list[str] = []
# Screenshots taken by the browser tests into the build folder (see durable_docs) are shown when present.
