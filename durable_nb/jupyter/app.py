"""The Jupyter server extension: its configuration (``c.DurableNB.store``), its handlers, its stores' lifetime."""

from __future__ import annotations

import os
from pathlib import Path

from jupyter_core.paths import jupyter_runtime_dir
from jupyter_server.extension.application import ExtensionApp
from traitlets import Unicode, default

from ..store.url import ENV_VAR
from . import api, approvals, comparison
from .catalog import StoreCatalog
from .frontend import MISSING_FRONT_END, installed_front_end

__all__ = ["DurableNB"]


class DurableNB(ExtensionApp):
    """Serves durable runs to JupyterLab's panel and the approvals page, on Jupyter's own sign-in."""

    name = "durable_nb"
    # Loaded into another app (JupyterLab, Notebook); it has no page of its own to open.
    load_other_extensions = True

    store = Unicode(
        help=(
            "The store URL served besides the default store and the stores the server's kernels attach "
            f"to (default: ${ENV_VAR}), e.g. sqlite:////srv/runs.db or postgresql://user@host/db."
        ),
    ).tag(config=True)

    @default("store")
    def _default_store(self) -> str:
        return os.environ.get(ENV_VAR, "")

    def initialize_settings(self) -> None:
        assert self.serverapp is not None
        kernels = self.serverapp.kernel_manager
        # Where this server's kernels keep their connection files, and so their registry entries.
        runtime = Path(getattr(kernels, "connection_dir", "") or jupyter_runtime_dir())
        self.catalog = StoreCatalog(self.store or None, kernels.list_kernel_ids, runtime)
        self.settings[api.CATALOG] = self.catalog
        if installed_front_end() is None:
            self.log.warning(MISSING_FRONT_END)

    def initialize_handlers(self) -> None:
        self.handlers.extend(api.HANDLERS)
        self.handlers.extend(approvals.HANDLERS)
        self.handlers.extend(comparison.HANDLERS)

    async def stop_extension(self) -> None:
        """Close the stores the server opened."""
        closed = self.catalog.close()
        self.log.info("durable_nb: closed %d store%s", closed, "" if closed == 1 else "s")
