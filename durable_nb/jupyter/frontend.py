"""Whether JupyterLab can load durable_nb's built front end, and the warning when it cannot.

An editable install on a machine without Node skips building the front end and succeeds; pip shows
the build's own note only under ``-v``. The server extension still loads, so it is the one place
that can say, in the server's log, why JupyterLab shows no cell states and no Durable panel.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from jupyter_core.paths import jupyter_path

__all__ = ["LABEXTENSION", "MISSING_FRONT_END", "installed_front_end"]

# The front end's package name: its folder under each of Jupyter's labextensions folders.
LABEXTENSION = "durable-nb"

MISSING_FRONT_END = (
    "durable_nb: JupyterLab will show no durable cell states and no Durable panel: the front end "
    f"({LABEXTENSION}/package.json) is in none of Jupyter's labextensions folders. An editable install "
    "without Node skips building it: install Node 20 with npm and run `pip install -e .` again, "
    "or install durable-nb from a wheel."
)


def installed_front_end(folders: Iterable[str] | None = None) -> Path | None:
    """Return the folder JupyterLab loads durable_nb's front end from, or None when none holds a build."""
    for folder in jupyter_path("labextensions") if folders is None else folders:
        # An install that skipped the build still leaves install.json there: package.json is the build's.
        found = Path(folder) / LABEXTENSION
        if (found / "package.json").is_file():
            return found
    return None
