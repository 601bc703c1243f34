"""Build hook: an editable install that could not build the JupyterLab front end says so, in one line.

hatch-jupyter-builder builds the front end with npm; for an editable install without Node it goes on
without it (``optional-editable-build``), with a note of its own that reads like a failure. Recent pip
(26.3) shows a build backend's warnings without ``-v``; older ones (23.2) show them only with it: the
server extension says it again, in the Jupyter server's log, whenever the front end is missing.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SKIPPED = (
    "durable-nb: installed without its JupyterLab front end (npm was not found, so its build was skipped): "
    "JupyterLab will show no Durable panel; install Node 20 with npm and run pip install -e . again."
)


class FrontEndNote(BuildHookInterface):
    """After the front end's build hook: warn when an editable install is left without the front end."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        built = Path(self.root) / "durable_nb" / "labextension" / "package.json"
        if self.target_name == "wheel" and version == "editable" and not built.is_file():
            warnings.warn(SKIPPED, stacklevel=1)
