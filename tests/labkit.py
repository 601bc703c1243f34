"""JupyterLab with durable_nb's extension (front end and server extension) for the browser tests.

The built front end (``durable_nb/labextension``, made by ``npm run build:prod`` in ``labextension/``)
is shown to JupyterLab through a data folder of the test's own on ``$JUPYTER_PATH``: nothing is
installed into the environment. Without a build and without Node, the tests skip, saying so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["BUILD", "SOURCE", "jupyterlab", "labextension_build"]

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "labextension"
BUILD = ROOT / "durable_nb" / "labextension"


def _newest(folder: Path) -> float:
    return max((p.stat().st_mtime for p in folder.rglob("*") if p.is_file()), default=0.0)


def labextension_build() -> Path:
    """The built front end, built first when Node is here and the build is missing or older than its sources."""
    built = BUILD / "package.json"
    sources = [SOURCE / "src", SOURCE / "style", SOURCE / "package.json"]
    stale = not built.exists() or any(
        (_newest(s) if s.is_dir() else s.stat().st_mtime) > built.stat().st_mtime for s in sources
    )
    if not stale:
        return BUILD
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        if not built.exists():
            pytest.skip("the JupyterLab extension is not built and Node is missing: install Node 20 and npm")
        return BUILD  # older than its sources, but the only one there is
    env = dict(os.environ)
    # `jupyter labextension build` comes with JupyterLab, beside this Python.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if not (SOURCE / "node_modules").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=SOURCE, env=env, check=True, timeout=900)
    subprocess.run([npm, "run", "build:prod"], cwd=SOURCE, env=env, check=True, timeout=900)
    return BUILD


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def jupyterlab(folder: Path, store: str, key_folder: Path, app: str = "jupyterlab") -> Iterator[dict[str, Any]]:
    """JupyterLab on 127.0.0.1 serving ``folder``, with durable_nb's front end and server extension.

    ``app="notebook"`` starts Notebook 7 instead: the same front-end extensions, its own pages.
    """
    build = labextension_build()
    data = folder / ".share"
    (data / "labextensions").mkdir(parents=True)
    (data / "labextensions" / "durable-nb").symlink_to(build, target_is_directory=True)
    config = folder / ".jupyter"
    settings = config / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    # No news prompt: it would cover the notebook in the screenshots.
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    runtime = folder / ".runtime"
    runtime.mkdir()
    port, token = _free_port(), uuid.uuid4().hex
    env = dict(os.environ)
    env["DURABLE_NB_STORE"] = store
    env["XDG_CONFIG_HOME"] = str(key_folder)
    env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(data), env.get("JUPYTER_PATH")]))
    env["JUPYTER_CONFIG_DIR"] = str(config)
    env["JUPYTER_RUNTIME_DIR"] = str(runtime)
    env["JUPYTERLAB_SETTINGS_DIR"] = str(config / "lab" / "user-settings")
    env["JUPYTERLAB_WORKSPACES_DIR"] = str(config / "lab" / "workspaces")
    # This checkout's durable_nb, in the server and in its kernels.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    log = folder / "lab.log"
    # Each application's own options: window.jupyterapp for the tests, no news or update checks.
    own = {
        "jupyterlab": [
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        "notebook": ["--JupyterNotebookApp.expose_app_in_browser=True"],
    }[app]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            app,
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            f"--IdentityProvider.token={token}",
            "--ServerApp.allow_root=True",
            f"--ServerApp.root_dir={folder}",
            "--ServerApp.jpserver_extensions={'durable_nb.jupyter': True}",
            *own,
        ],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w"),
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    try:
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                assert server.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "JupyterLab did not start"
                time.sleep(0.5)
        yield {"base": base, "token": token, "store": store, "folder": str(folder), "runtime": str(runtime), "env": env}
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=20)
