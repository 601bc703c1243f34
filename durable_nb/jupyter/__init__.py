"""JupyterLab integration: the Jupyter server extension, and what kernels tell it.

``store_key`` (stores.py) and the registry writer (registry.py) are imported by kernels and
import nothing of Jupyter's server; the extension itself (app.py) is imported by the server only.
"""

from __future__ import annotations

from typing import Any

__all__: list[str] = []


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """Tell Jupyter where the server extension is."""
    from .app import DurableNB

    return [{"module": "durable_nb.jupyter", "app": DurableNB}]


def _load_jupyter_server_extension(serverapp: Any) -> Any:
    """Load the extension into a running Jupyter server (for servers that load modules, not apps)."""
    from .app import DurableNB

    return DurableNB._load_jupyter_server_extension(serverapp)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Tell JupyterLab where the prebuilt front end is, for development installs."""
    return [{"src": "../labextension", "dest": "durable-nb"}]
