"""The service face: an HTTP API over runs (``durable-nb serve``) and its Python client.

Only the client is imported eagerly (it needs httpx when used); the app needs the ``serve`` extra.
"""

from __future__ import annotations

from .client import Client

__all__ = ["Client"]
