"""A real ``jupyter server`` for tests, with durable_nb's server extension, as a subprocess."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
from servicekit import ROOT, free_port

__all__ = ["TOKEN", "JupyterServer"]

TOKEN = "t" * 48


class JupyterServer:
    """``jupyter server`` on 127.0.0.1 with a token, in ``folder``, its runtime and config folders its own.

    The extension is enabled on the command line, as the installed config does on install. ``python``
    runs it (another environment's, to see what Jupyter finds there).
    """

    def __init__(
        self, folder: Path, env: dict[str, str] | None = None, options: Sequence[str] = (), python: str = sys.executable
    ) -> None:
        self.folder = folder
        self.runtime = folder / "runtime"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        environ = dict(os.environ, **(env or {}))
        environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), environ.get("PYTHONPATH", "")])
        environ["JUPYTER_RUNTIME_DIR"] = str(self.runtime)
        environ["JUPYTER_CONFIG_DIR"] = str(folder / "config")
        self.log = open(folder / "jupyter.log", "w")
        self.process = subprocess.Popen(
            [
                python,
                "-m",
                "jupyter_server",
                "--no-browser",
                "--allow-root",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={TOKEN}",
                f"--ServerApp.root_dir={folder}",
                '--ServerApp.jpserver_extensions={"durable_nb.jupyter": True}',
                *options,
            ],
            env=environ,
            cwd=folder,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        # Token in a header: what a script sends. A browser's session (cookies) is ``session()``.
        self.client = httpx.Client(base_url=self.url, headers={"Authorization": f"token {TOKEN}"}, timeout=60)
        deadline = time.monotonic() + 120
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"jupyter server exited:\n{self.output()[-3000:]}")
            try:
                if self.client.get("/api/status").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"jupyter server did not start:\n{self.output()[-3000:]}")
            time.sleep(0.1)

    def output(self) -> str:
        """What the server logged so far."""
        return (self.folder / "jupyter.log").read_text(errors="replace")

    @contextlib.contextmanager
    def session(self) -> Iterator[httpx.Client]:
        """A browser-like client signed in once with ``?token=`` and then only by Jupyter's cookies."""
        with httpx.Client(base_url=self.url, timeout=60) as browser:
            signed = browser.get(f"/api/me?token={TOKEN}")
            assert signed.status_code == 200, signed.text
            assert any(name.startswith("username-") for name in browser.cookies), dict(browser.cookies)
            yield browser

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.get(path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.post(path, **kwargs)

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self.log.close()
