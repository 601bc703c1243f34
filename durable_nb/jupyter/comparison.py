"""The cells of a run and its forks side by side at ``/durable/compare/<run>``, on Jupyter's sign-in.

The panel's fork tree links here: the page is ``compare_cells`` rendered as in a notebook. It runs
no script; the policy allows exactly the styles the page itself wrote (by their hashes), images
only as ``data:`` URIs, and no framing of the page. A cell's HTML output sits in a sandboxed
iframe whose document inherits that policy, so it can run nothing either.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from tornado import web

from ..errors import DurableError, InvalidInput
from ..service.headers import security_headers
from ..views.cells import acompare_cells
from .api import CATALOG
from .catalog import StoreCatalog
from .errors import status_of

__all__ = ["HANDLERS", "CompareHandler", "page_policy"]

_STYLES = re.compile(r"<style>(.*?)</style>", re.DOTALL)
_STYLE_ATTRIBUTES = re.compile(r' style="([^"]*)"')
# Before a page is written (and for an error page, which has no styles): nothing at all.
_NOTHING = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
_MAX_RUNS = 20


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode("ascii") + "'"


def page_policy(page: str) -> str:
    """Return the Content-Security-Policy allowing a page's own styles (its ``<style>`` blocks and ``style``
    attributes, by hash), ``data:`` images and sandboxed ``srcdoc`` frames, and nothing else."""
    blocks = {_hash(m) for m in _STYLES.findall(page)}
    attributes = {_hash(html.unescape(m)) for m in _STYLE_ATTRIBUTES.findall(page)}
    styles = " ".join(sorted(blocks | attributes)) or "'none'"
    unsafe_hashes = "'unsafe-hashes' " if attributes else ""
    return (
        f"default-src 'none'; style-src {unsafe_hashes}{styles}; img-src data:; frame-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )


class CompareHandler(JupyterHandler):
    """``GET /durable/compare/<run>?store=KEY[&with=RUN…]``: the cells of the run and its forks (or of the
    runs named by ``with``), side by side."""

    auth_resource = "durable"
    _policy = _NOTHING

    @property
    def content_security_policy(self) -> str:
        return self._policy

    def set_default_headers(self) -> None:
        super().set_default_headers()
        for name, value in security_headers(self._policy).items():
            self.set_header(name, value)

    @property
    def catalog(self) -> StoreCatalog:
        return self.settings[CATALOG]

    @web.authenticated
    @authorized
    async def get(self, run_id: str) -> None:
        try:
            key = self.get_query_argument("store", None)
            if not key:
                raise InvalidInput("Name the store with ?store=KEY; GET /durable/api/stores lists the keys.")
            others = self.get_query_arguments("with")
            if len(others) > _MAX_RUNS:
                raise InvalidInput(f"Compare at most {_MAX_RUNS} runs at once.")
            _, store = self.catalog.find(key)
            frame = await acompare_cells([run_id, *others] if others else run_id, store=store)
            body = frame._repr_html_()
            title = f"Cells of run {run_id}" + (" and its forks" if not others else "")
        except DurableError as error:
            self.set_status(status_of(error))
            body = f"<p>{html.escape(str(error))}</p>"
            title = "The cells cannot be compared"
        page = (
            "<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1>{body}</body></html>"
        )
        self._policy = page_policy(page)
        for name, value in security_headers(self._policy).items():
            self.set_header(name, value)
        self.finish(page)


HANDLERS: list[tuple[str, type[JupyterHandler]]] = [(r"/durable/compare/([^/]+)", CompareHandler)]
