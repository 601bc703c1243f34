"""The nbclient client that runs notebooks for durable_nb: ``run-notebook`` and background replays."""

from __future__ import annotations

from ..errors import ConfigurationError

__all__ = ["durable_client_class"]


def durable_client_class() -> type:
    """Return nbclient's client with durable_nb's notes kept out of the outputs and streams joined."""
    try:
        from nbclient import NotebookClient
    except ImportError as error:
        raise ConfigurationError(
            "Running notebooks headless needs its extra: pip install 'durable-nb[headless]'."
        ) from error

    from .notes import NoteSeparator
    from .streams import StreamJoiner

    class DurableClient(NoteSeparator, StreamJoiner, NotebookClient):  # type: ignore[misc]
        """nbclient's client, with durable_nb's notes kept out of the outputs and streams joined as JupyterLab does."""

    return DurableClient
