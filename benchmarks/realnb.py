"""Real notebooks nobody here wrote: scikit-learn gallery examples run plain and durable in real kernels.

``python -m benchmarks.realnb [--reps N] [--only NAME] [--json PATH]``

The source archive of the installed scikit-learn is fetched from the package index pip is configured
with (never built) and cached; six examples from its ``examples/`` folder are split into cells at
``# %%``. Each notebook runs in fresh ipykernel kernels (inline matplotlib backend): plain, durable
(every cell ``%%durable c<i>``), restore-all (the durable notebook again on the same store), and a
kernel killed (SIGKILL) in a middle cell followed by Run All in a new kernel. Plain and durable runs
alternate (P D P D …). After every run the kernel prints fingerprints of every user variable
(``realnb_probe.py``); they, the PNG images and the errors of each cell are compared with the plain
run. What differs between two plain runs (a training time, a plot titled with it) is reported as
nondeterministic, not against durable_nb; a restore-all must match the durable run it restores exactly.
durable_nb's modules are byte-compiled first, as an installed package's are.

Wall time and the kernel's CPU time are both reported; the CPU time of a durable run is also split
into durable_nb's own threads (its commits) and the rest. On a busy machine the rest swings widely
between runs of either mode in code that calls BLAS often on small matrices (statsmodels' ARIMA fits):
the BLAS library's worker threads spin while they wait, and wait longer when the machine is loaded.
"""

from __future__ import annotations

import argparse
import ast
import base64
import compileall
import hashlib
import io
import json
import os
import queue
import re
import shutil
import signal
import sqlite3
import ssl
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from durable_nb.notebook.notes import is_note

NOTEBOOKS = (
    "model_selection/plot_precision_recall.py",
    "model_selection/plot_roc.py",
    "linear_model/plot_lasso_model_selection.py",
    "semi_supervised/plot_label_propagation_digits.py",
    "model_selection/plot_grid_search_digits.py",
    "model_selection/plot_likelihood_ratios.py",
)
PROBE = Path(__file__).with_name("realnb_probe.py")
MARKER = "REALNB-FINGERPRINT "
THREADS_MARKER = "REALNB-THREADS "
OWN_THREADS = "durable-nb"  # the names of durable_nb's own threads start so (its event loop's: durable-nb-loop)
RESTORED_NOTE = re.compile(r"restored '([^']+)' from checkpoint")
CELL_TIMEOUT = 1800.0
SHORT_CELL = 0.2  # a cell shorter than this (plain) is killed as soon as it starts
PIXEL_TOLERANCE = 2  # of 255, per channel: PNGs that decode to pixels this close count as equal


def cache_folder() -> Path:
    """Where fetched archives are kept between runs ($DURABLE_NB_BENCH_CACHE or ~/.cache/durable_nb-bench)."""
    return Path(os.environ.get("DURABLE_NB_BENCH_CACHE", "~/.cache/durable_nb-bench")).expanduser()


# -- the source archive --------------------------------------------------------------------------


def _pip_config() -> dict[str, str]:
    """pip's configured options (``pip config list``), later scopes overriding earlier ones."""
    try:
        listing = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    options: dict[str, str] = {}
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        if value:
            options[key.split(".", 1)[-1]] = value.strip().strip("'\"")
    return options


def index_urls() -> list[str]:
    """The indexes pip would ask: its index URL (default PyPI), then its extra index URLs."""
    config = _pip_config()
    primary = os.environ.get("PIP_INDEX_URL") or config.get("index-url") or "https://pypi.org/simple"
    extra = (os.environ.get("PIP_EXTRA_INDEX_URL") or config.get("extra-index-url") or "").split()
    return [primary, *extra]


def _ssl_context() -> ssl.SSLContext:
    cafile = os.environ.get("PIP_CERT") or _pip_config().get("cert")
    return ssl.create_default_context(cafile=cafile if cafile and Path(cafile).exists() else None)


def _get(url: str, accept: str | None = None) -> tuple[bytes, str]:
    """The body and content type at a URL (http(s) or file)."""
    if url.startswith("file:"):
        path = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
        if path.is_dir():
            path = path / "index.html"
        return path.read_bytes(), "application/json" if path.suffix == ".json" else "text/html"
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=300, context=_ssl_context()) as response:
        return response.read(), response.headers.get_content_type()


class _Links(HTMLParser):
    """The anchors of a simple-index HTML page: (text, href)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append(("".join(self._text).strip(), self._href))
            self._href = None


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _index_files(index: str, project: str) -> list[tuple[str, str, str | None]]:
    """The files an index lists for a project: (file name, absolute URL, sha256 or None)."""
    page = index.rstrip("/") + "/" + _normalize(project) + "/"
    body, kind = _get(page, accept="application/vnd.pypi.simple.v1+json, text/html;q=0.1")
    files: list[tuple[str, str, str | None]] = []
    if "json" in kind:
        for item in json.loads(body)["files"]:
            files.append((item["filename"], urllib.parse.urljoin(page, item["url"]), item["hashes"].get("sha256")))
        return files
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    for text, href in parser.links:
        url, _, fragment = urllib.parse.urljoin(page, href).partition("#")
        name = text or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        sha = fragment.split("=", 1)[1] if fragment.startswith("sha256=") else None
        files.append((name, url, sha))
    return files


def _is_sdist(filename: str, project: str, version: str) -> bool:
    for suffix in (".tar.gz", ".zip"):
        if filename.endswith(suffix):
            stem = filename[: -len(suffix)]
            name, _, found = stem.rpartition("-")
            return _normalize(name) == _normalize(project) and found == version
    return False


def fetch_sdist(project: str, version: str, folder: Path | None = None) -> Path:
    """The source archive of ``project==version``: from the cache, else downloaded (not built) and cached."""
    folder = folder or cache_folder()
    folder.mkdir(parents=True, exist_ok=True)
    for cached in folder.iterdir():
        if _is_sdist(cached.name, project, version):
            return cached
    problems = []
    for index in index_urls():
        try:
            candidates = [f for f in _index_files(index, project) if _is_sdist(f[0], project, version)]
        except (OSError, ValueError, KeyError) as error:
            problems.append(f"{index}: {error}")
            continue
        if not candidates:
            problems.append(f"{index}: no source archive of {project} {version}")
            continue
        filename, url, sha = candidates[0]
        data, _ = _get(url)
        if sha is not None and hashlib.sha256(data).hexdigest() != sha:
            raise RuntimeError(f"{url}: sha256 does not match the index's")
        partial = folder / (filename + ".part")
        partial.write_bytes(data)
        partial.replace(folder / filename)
        return folder / filename
    raise RuntimeError(f"cannot fetch the source archive of {project} {version}: " + "; ".join(problems))


def read_examples(archive: Path, paths: list[str]) -> dict[str, str]:
    """The text of each ``examples/<path>`` in a source archive (a .tar.gz sdist)."""
    found: dict[str, str] = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            _, _, inside = member.name.partition("/")
            if inside.startswith("examples/") and inside[len("examples/") :] in paths:
                handle = tar.extractfile(member)
                if handle is not None:
                    found[inside[len("examples/") :]] = handle.read().decode("utf-8")
    missing = set(paths) - set(found)
    if missing:
        raise RuntimeError(f"{archive.name} has no examples/{', examples/'.join(sorted(missing))}")
    return found


# -- a script as a notebook ----------------------------------------------------------------------


def _is_prose(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def split_cells(source: str) -> list[str]:
    """Cells of a percent-format script: split at lines starting with ``# %%``; no comment-only or docstring cells."""
    chunks: list[list[str]] = [[]]
    for line in source.splitlines():
        if line.startswith("# %%"):
            chunks.append([])
        else:
            chunks[-1].append(line)
    cells = []
    for chunk in chunks:
        text = "\n".join(chunk).strip("\n")
        if any(not _is_prose(node) for node in ast.parse(text).body):
            cells.append(text)
    return cells


def import_cells(cells: list[str]) -> list[str]:
    """The top-level import statements of each cell, as cells of their own (cells without one are dropped)."""
    found = []
    for text in cells:
        lines = [
            ast.get_source_segment(text, node) or ""
            for node in ast.parse(text).body
            if isinstance(node, ast.Import | ast.ImportFrom)
        ]
        if lines:
            found.append("\n".join(lines))
    return found


def data_sources(cells: list[str]) -> dict[str, list[str]]:
    """The dataset functions a notebook calls, and what would download at run time (fetch_*, URLs)."""
    datasets: set[str] = set()
    downloads: set[str] = set()
    for text in cells:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
                if name.startswith(("load_", "fetch_", "make_")) and name not in ("make_pipeline", "make_scorer"):
                    datasets.add(name)
                if name.startswith("fetch_") or name in ("urlopen", "urlretrieve", "read_url"):
                    downloads.add(name)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "://" in node.value:
                downloads.add(node.value[:80])
    return {"datasets": sorted(datasets), "downloads": sorted(downloads)}


def durable_cells(name: str, cells: list[str]) -> list[str]:
    """The durable notebook: a first cell loading durable_nb and attaching the run, then ``%%durable c<i>`` cells."""
    return [f"%load_ext durable_nb\n%durable run {name}"] + [
        f"%%durable c{i}\n{text}" for i, text in enumerate(cells, 1)
    ]


def compile_package(folder: Path | None = None) -> None:
    """Byte-compile a durable_nb source folder (this one by default), as installing a package does.

    With PYTHONDONTWRITEBYTECODE set (as on CI machines) every kernel would otherwise compile
    durable_nb's sources again on import, about 0.15 s that no installed copy pays.
    """
    compileall.compile_dir(folder or Path(__file__).resolve().parent.parent / "durable_nb", quiet=1)


# -- a real kernel -------------------------------------------------------------------------------


@dataclass
class CellResult:
    """What one cell did in a kernel."""

    status: str  # ok, error, dead, killed, timeout
    seconds: float
    images: list[str] = field(default_factory=list)  # base64 PNGs, in order
    error: str | None = None
    text: str = ""
    cpu: float = 0.0  # CPU seconds the kernel process used meanwhile (all its threads)
    thread_cpu: dict[int, float] = field(default_factory=dict)  # the same, per thread (native id)

    @property
    def restored(self) -> list[str]:
        """The cells durable_nb said it restored here."""
        return RESTORED_NOTE.findall(self.text)


class Kernel:
    """A fresh ipykernel (python3 of this interpreter) that runs cells one at a time, as Run All does."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        from jupyter_client.manager import KernelManager

        from durable_nb.headless.kernels import ipc_sockets

        # On Unix sockets in a private folder, as durable_nb starts its own kernels (never TCP).
        self.sockets = ExitStack()
        self.manager = KernelManager(kernel_name="python3", **self.sockets.enter_context(ipc_sockets()))
        self.log = folder / "kernels.log"  # the kernel's own stdout and stderr (not the cells')
        with open(self.log, "ab") as log:
            self.manager.start_kernel(cwd=str(folder), env=env, stdout=log, stderr=log)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def cpu(self) -> float:
        """CPU seconds the kernel process has used so far (0 once it is gone).

        Less disturbed than wall time by other work on the machine: a benchmark on a shared
        machine compares these too."""
        try:
            process = self.manager.provisioner.process  # type: ignore[union-attr]
            fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, AttributeError, IndexError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def thread_cpu(self) -> dict[int, float]:
        """CPU seconds each thread of the kernel process has used so far, by native thread id.

        Tells durable_nb's own work (its commits run on its event loop's thread) from the cell's
        code and the threads it starts (a BLAS library's workers), whose CPU time swings with the
        machine's load."""
        try:
            process = self.manager.provisioner.process  # type: ignore[union-attr]
            tasks = Path(f"/proc/{process.pid}/task")
            found = {}
            for task in tasks.iterdir():
                try:
                    fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue  # the thread ended meanwhile
                found[int(task.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            return found
        except (OSError, AttributeError, IndexError, ValueError):
            return {}

    def thread_names(self) -> dict[int, str]:
        """The names of the kernel's Python threads, by native thread id (empty if it cannot answer)."""
        # No name is bound: the fingerprints taken next see the user's variables only.
        threads = "{t.native_id: t.name for t in __import__('threading').enumerate()}"
        code = f"print({THREADS_MARKER!r} + __import__('json').dumps({threads}))"
        for line in self._execute(code, None, 60).text.splitlines():
            if line.startswith(THREADS_MARKER):
                return {int(key): name for key, name in json.loads(line[len(THREADS_MARKER) :]).items()}
        return {}

    def execute(self, code: str, kill_after: float | None = None, timeout: float = CELL_TIMEOUT) -> CellResult:
        """Run one cell and collect its output; with ``kill_after``, SIGKILL the kernel that long after it starts."""
        before, threads_before = self.cpu(), self.thread_cpu()
        result = self._execute(code, kill_after, timeout)
        after, threads_after = self.cpu(), self.thread_cpu()
        result.cpu = max(after - before, 0.0) if after else 0.0
        result.thread_cpu = {tid: seconds - threads_before.get(tid, 0.0) for tid, seconds in threads_after.items()}
        return result

    def _execute(self, code: str, kill_after: float | None, timeout: float) -> CellResult:
        started = time.perf_counter()
        msg_id = self.client.execute(code, store_history=True, allow_stdin=False)
        text: list[str] = []
        images: list[str] = []
        error: str | None = None
        busy_at: float | None = None
        while True:
            now = time.perf_counter()
            if kill_after is not None and busy_at is not None and now - busy_at >= kill_after:
                self.kill()
                return CellResult("killed", now - started, images, error, "".join(text))
            if now - started > timeout:
                return CellResult("timeout", now - started, images, error, "".join(text))
            try:
                message = self.client.get_iopub_msg(timeout=0.01 if kill_after is not None else 0.2)
            except queue.Empty:
                if not self.manager.is_alive():
                    return CellResult("dead", time.perf_counter() - started, images, error, "".join(text))
                continue
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "status" and content["execution_state"] == "busy":
                busy_at = time.perf_counter()
            elif kind == "stream":
                text.append(content["text"])
            elif kind in ("display_data", "update_display_data") and is_note(content):
                text.append(content["data"]["text/plain"] + "\n")  # durable_nb's own notes
            elif kind in ("display_data", "execute_result") and "image/png" in content["data"]:
                images.append(content["data"]["image/png"])
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
            elif kind == "status" and content["execution_state"] == "idle":
                break
        while True:
            reply = self.client.get_shell_msg(timeout=60)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        seconds = time.perf_counter() - started
        status = reply["content"]["status"]
        if status != "ok" and error is None:
            error = f"{reply['content'].get('ename', status)}: {reply['content'].get('evalue', '')}"
        return CellResult("ok" if status == "ok" else "error", seconds, images, error, "".join(text))

    def fingerprints(self) -> dict[str, Any] | None:
        """Fingerprints of the kernel's user variables (``realnb_probe.py``), or None if it cannot answer."""
        result = self.execute(f"__import__('runpy').run_path({str(PROBE)!r}, run_name='__realnb_probe__');")
        for line in result.text.splitlines():
            if line.startswith(MARKER):
                return json.loads(line[len(MARKER) :])
        return None

    def kill(self) -> None:
        """SIGKILL the kernel process and wait until it is gone."""
        process = self.manager.provisioner.process  # type: ignore[union-attr]
        os.kill(process.pid, signal.SIGKILL)
        while self.manager.is_alive():
            time.sleep(0.02)

    def close(self) -> None:
        """Stop the channels and the kernel."""
        self.client.stop_channels()
        if self.manager.is_alive():
            self.manager.shutdown_kernel(now=False)
        else:
            self.manager.cleanup_resources()
        self.sockets.close()


@dataclass
class NotebookRun:
    """One run of a notebook in one fresh kernel."""

    cells: list[CellResult]
    variables: dict[str, Any] | None
    total_s: float = 0.0
    setup: CellResult | None = None  # a durable notebook's first cell (%load_ext, %durable run)
    cpu_s: float = 0.0  # the kernel's CPU seconds over the cells (setup cell included)
    own_cpu_s: float = 0.0  # of which durable_nb's own threads used (its commits); 0 in a plain kernel

    @property
    def stopped(self) -> str | None:
        """Where and why Run All stopped early, if it did."""
        if self.setup is not None and self.setup.status != "ok":
            return f"setup cell: {self.setup.error or self.setup.status}"
        for index, cell in enumerate(self.cells, 1):
            if cell.status != "ok":
                return f"c{index}: {cell.error or cell.status}"
        return None

    def without_setup(self) -> NotebookRun:
        """The same run with its first (setup) cell apart, so that cell i is c<i+1> again."""
        return NotebookRun(
            self.cells[1:],
            self.variables,
            self.total_s,
            self.cells[0] if self.cells else None,
            self.cpu_s,
            self.own_cpu_s,
        )


def run_notebook(
    folder: Path, env: dict[str, str], sources: list[str], kill_at: int | None = None, kill_after: float = 0.0
) -> NotebookRun:
    """Run All in a fresh kernel (stopping at the first error); optionally kill it inside cell ``kill_at``."""
    kernel = Kernel(folder, env)
    results: list[CellResult] = []
    try:
        for index, source in enumerate(sources):
            result = kernel.execute(source, kill_after=kill_after if index == kill_at else None)
            results.append(result)
            if index == kill_at and result.status == "ok":
                kernel.kill()  # the cell finished before its kill time: kill right after it
            if result.status != "ok" or index == kill_at:
                break
        alive = kernel.manager.is_alive() and (not results or results[-1].status not in ("killed", "dead", "timeout"))
        names = kernel.thread_names() if alive else {}
        variables = kernel.fingerprints() if alive else None
    finally:
        kernel.close()
    own = sum(s for r in results for tid, s in r.thread_cpu.items() if names.get(tid, "").startswith(OWN_THREADS))
    return NotebookRun(
        results, variables, sum(r.seconds for r in results), cpu_s=sum(r.cpu for r in results), own_cpu_s=own
    )


# -- comparing runs ------------------------------------------------------------------------------


def _pixels(png: str) -> Any:
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(png))) as image:
        return np.asarray(image.convert("RGBA"), dtype=np.int16)


def images_equal(first: str, second: str) -> bool:
    """Two base64 PNGs are the same picture: equal bytes, or pixels within PIXEL_TOLERANCE."""
    if first == second:
        return True
    a, b = _pixels(first), _pixels(second)
    return a.shape == b.shape and int(abs(a - b).max()) <= PIXEL_TOLERANCE


def image_diffs(base: list[list[str]], other: list[list[str]], labels: list[str]) -> list[str]:
    """Cells whose PNG outputs differ (count or picture), by label."""
    diffs = []
    for index in range(min(len(base), len(other))):
        a, b = base[index], other[index]
        if len(a) != len(b):
            diffs.append(f"{labels[index]} ({len(a)}→{len(b)} images)")
        elif not all(images_equal(x, y) for x, y in zip(a, b, strict=True)):
            diffs.append(labels[index])
    return diffs


def variable_diffs(base: dict[str, Any], other: dict[str, Any]) -> dict[str, list[str]]:
    """Variables that differ, each with what differs: "missing", "extra", "type A→B", its parts, or "" (the whole)."""
    diffs: dict[str, list[str]] = {}
    for name in sorted(set(base) | set(other)):
        if name not in other:
            diffs[name] = ["missing"]
        elif name not in base:
            diffs[name] = ["extra"]
        elif base[name]["hash"] != other[name]["hash"]:
            a, b = base[name], other[name]
            if a["type"] != b["type"]:
                diffs[name] = [f"type {a['type'].rsplit('.', 1)[-1]}→{b['type'].rsplit('.', 1)[-1]}"]
                continue
            parts_a, parts_b = a.get("parts", {}), b.get("parts", {})
            parts = [p for p in set(parts_a) | set(parts_b) if parts_a.get(p) != parts_b.get(p)]
            diffs[name] = sorted(parts, key=lambda p: (p.lstrip(".").startswith("_"), p)) or [""]
    return diffs


def _describe(name: str, parts: list[str]) -> str:
    """``-name`` missing, ``+name`` extra, ``name (A→B)`` another type, ``name[part,…]`` the parts that differ."""
    if parts == ["missing"]:
        return f"-{name}"
    if parts == ["extra"]:
        return f"+{name}"
    if parts and parts[0].startswith("type "):
        return f"{name} ({parts[0][5:]})"
    shown = [p.lstrip(".") for p in parts if p]
    return f"{name}[{','.join(shown[:3])}{',…' if len(shown) > 3 else ''}]" if shown else name


def _split(diffs: dict[str, list[str]], noise: dict[str, set[str]]) -> tuple[list[str], list[str]]:
    """Differences apart from what also differs between plain runs, and those (nondeterministic) ones."""
    real, noisy = [], []
    for name, parts in diffs.items():
        known = noise.get(name, set())
        rest = [p for p in parts if p not in known]
        if rest:
            real.append(_describe(name, rest))
        if len(rest) < len(parts):
            noisy.append(_describe(name, [p for p in parts if p in known]))
    return real, noisy


def _cell(diff: str) -> str:
    return diff.split(" ", 1)[0]


def _image_key(diff: str) -> str:
    """An image difference's kind, for noise: ``c3 count`` (how many images) or ``c3`` (the pictures)."""
    return f"{_cell(diff)} count" if diff.endswith("images)") else _cell(diff)


def compare(
    plain: NotebookRun, other: NotebookRun, noise: dict[str, set[str]], noisy_images: set[str], labels: list[str]
) -> dict[str, Any]:
    """What differs between a plain run and another run: variables, images, errors (nondeterministic apart)."""
    if other.variables is None or plain.variables is None:
        return {"faithful": False, "variables": ["(no fingerprints: the kernel did not finish)"], "images": []}
    real_vars, noisy_vars = _split(variable_diffs(plain.variables, other.variables), noise)
    images = image_diffs([c.images for c in plain.cells], [c.images for c in other.cells], labels)
    errors = [
        f"{labels[i]}: {a.error or 'ok'} → {b.error or 'ok'}"
        for i, (a, b) in enumerate(zip(plain.cells, other.cells, strict=False))
        if a.error != b.error
    ]
    if len(plain.cells) != len(other.cells):
        errors.append(f"ran {len(plain.cells)} cells → {len(other.cells)}")
    real_images = [d for d in images if _image_key(d) not in noisy_images]
    return {
        "faithful": not (real_vars or real_images or errors),
        "variables": real_vars,
        "images": real_images,
        "errors": errors,
        "nondeterministic_variables": noisy_vars,
        "nondeterministic_images": [d for d in images if _image_key(d) in noisy_images],
    }


def exact(source: NotebookRun, restored: NotebookRun, labels: list[str]) -> dict[str, Any]:
    """What a restore-all did not bring back exactly as the durable run that committed it had it."""
    if source.variables is None or restored.variables is None:
        return {"faithful": False, "variables": ["(no fingerprints)"], "images": []}
    variables = [_describe(n, p) for n, p in variable_diffs(source.variables, restored.variables).items()]
    images = image_diffs([c.images for c in source.cells], [c.images for c in restored.cells], labels)
    return {"faithful": not (variables or images), "variables": variables, "images": images}


def _noise(modes: list[list[NotebookRun]], labels: list[str]) -> tuple[dict[str, set[str]], set[str]]:
    """What differs between runs that executed every cell in the same mode: variables (with parts) and image cells.

    Each mode (plain, durable executing) is compared within itself only, so that what durable_nb changes
    consistently is never taken for noise.
    """
    parts: dict[str, set[str]] = {}
    cells: set[str] = set()
    for runs in modes:
        for other in runs[1:]:
            if runs[0].variables is not None and other.variables is not None:
                for name, differing in variable_diffs(runs[0].variables, other.variables).items():
                    parts.setdefault(name, set()).update(differing)
            base = [c.images for c in runs[0].cells]
            cells |= {_image_key(d) for d in image_diffs(base, [c.images for c in other.cells], labels)}
    return parts, cells


# -- the scenario --------------------------------------------------------------------------------


def _store_bytes(folder: Path) -> int:
    database = folder / "runs.db"
    if database.exists():
        with sqlite3.connect(database) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    files = [folder / "runs.db", folder / "runs.db-wal"]
    blobs = folder / "runs.db-blobs"
    if blobs.is_dir():
        files += [p for p in blobs.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files if p.exists())


def committed_cells(store: Path, name: str) -> list[str] | None:
    """The cells committed in the latest run of that name (``dnb.runs``/``dnb.history``, in a separate process)."""
    script = (
        "import json, sys, durable_nb as dnb\n"
        "url, name = sys.argv[1:]\n"
        "runs = dnb.runs(name, store=url)\n"
        "steps = dnb.history(runs['run_id'].iloc[0], store=url)['step'] if len(runs) else []\n"
        "print(json.dumps([s.split(':', 1)[1] for s in steps if s.startswith('after:')]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, f"sqlite:///{store}/runs.db", name],
        cwd=store,  # import durable_nb as the kernels do, not from the current folder
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        _say(f"  (could not read the committed cells: {done.stderr.strip()[-300:]})")
        return None


def _env(folder: Path, store: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)  # ipykernel's default: the inline backend
    env["SCIKIT_LEARN_DATA"] = str(folder / "scikit_learn_data")  # anything fetched at run time lands here
    if store is not None:
        env["DURABLE_NB_STORE"] = f"sqlite:///{store}/runs.db"
    return env


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else float("nan")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def measure_notebook(path: str, source: str, reps: int, work: Path, time_imports: bool = True) -> dict[str, Any]:
    """Every measurement of one notebook: plain, durable, restore-all, imports, kill + Run All, faithfulness.

    ``time_imports=False`` leaves out the run of the import cells alone (a kernel and the imports, only
    timed): ``imports`` is then None.
    """
    compile_package()
    name = Path(path).stem
    cells = split_cells(source)
    labels = [f"c{i}" for i in range(1, len(cells) + 1)]
    durable = durable_cells(name, cells)
    imports = import_cells(cells)
    folder = work / name
    folder.mkdir(parents=True)
    plains: list[NotebookRun] = []
    durables: list[NotebookRun] = []
    restores: list[NotebookRun] = []
    import_s: list[float] = []
    # The imports again, with as many empty cells after them as the notebook has other cells: a
    # restore-all executes every cell, and each execution's round trip costs the same, durable or not.
    padded = imports + ["pass"] * max(len(cells) - len(imports), 0)
    padded_s: list[float] = []
    store_bytes: list[int] = []
    restore_exact: list[dict[str, Any]] = []
    for rep in range(reps):
        plains.append(run_notebook(folder, _env(folder), cells))
        _say(f"  {name} rep {rep + 1}: plain {plains[-1].total_s:.1f} s {plains[-1].stopped or ''}")
        store = folder / f"store-{rep}"
        store.mkdir()
        run = run_notebook(folder, _env(folder, store), durable)
        durables.append(run.without_setup())
        store_bytes.append(_store_bytes(store))
        restore = run_notebook(folder, _env(folder, store), durable)
        restores.append(restore.without_setup())
        restore_exact.append(exact(durables[-1], restores[-1], labels))
        if time_imports:
            import_s.append(run_notebook(folder, _env(folder), imports).total_s)
            padded_s.append(run_notebook(folder, _env(folder), padded).total_s)
        _say(
            f"  {name} rep {rep + 1}: durable {run.total_s:.1f} s {durables[-1].stopped or ''}, "
            f"restore-all {restore.total_s:.1f} s" + (f", imports {import_s[-1]:.1f} s" if import_s else "")
        )
    noisy_vars, noisy_images = _noise([plains, durables], labels)
    plain_cell_s = [
        statistics.median(p.cells[i].seconds for p in plains if i < len(p.cells)) for i in range(len(plains[0].cells))
    ]
    # The kill: the slowest plain cell of the middle third, at half its plain duration.
    third = range(len(cells) // 3, max(2 * len(cells) // 3, len(cells) // 3 + 1))
    middle = [i for i in third if i < len(plain_cell_s)] or [min(len(plain_cell_s) - 1, len(cells) // 2)]
    victim = max(middle, key=lambda i: plain_cell_s[i])
    _say(f"  {name}: killing in {labels[victim]} ({plain_cell_s[victim]:.2f} s plain)")
    delay = plain_cell_s[victim] / 2 if plain_cell_s[victim] >= SHORT_CELL else 0.0
    kill_store = folder / "store-kill"
    kill_store.mkdir()
    killed = run_notebook(folder, _env(folder, kill_store), durable, kill_at=victim + 1, kill_after=delay)
    reached = len(killed.cells) == victim + 2  # the setup cell, c1 … the victim
    if reached and killed.cells[-1].status == "killed":
        outcome = "killed in the cell"
    elif reached and killed.cells[-1].status == "ok":
        outcome = "the cell finished first; killed right after it"
    else:
        outcome = f"never reached: Run All stopped at {killed.without_setup().stopped}"
    committed = committed_cells(kill_store, name)
    rerun = run_notebook(folder, _env(folder, kill_store), durable).without_setup()
    restored_after_kill = [n for c in rerun.cells for n in c.restored]
    _say(f"  {name}: killed in {labels[victim]} after {delay:.2f} s; Run All again {rerun.total_s:.1f} s")
    data_folder = folder / "scikit_learn_data"
    found = sorted(p.name for p in data_folder.rglob("*")) if data_folder.exists() else []
    plain_total = _median([p.total_s for p in plains])
    durable_total = _median([d.total_s for d in durables])
    plain_cpu = _median([p.cpu_s for p in plains])
    durable_cpu = _median([d.cpu_s for d in durables])
    durable_own_cpu = _median([d.own_cpu_s for d in durables])
    durable_rest_cpu = _median([d.cpu_s - d.own_cpu_s for d in durables])
    restored_all = [node for r in restores for c in r.cells for node in c.restored]
    return {
        "notebook": name,
        "path": f"examples/{path}",
        "cells": len(cells),
        "data": {**data_sources(cells), "fetched_at_run_time": found},
        "plain": {
            "total_s": plain_total,
            "min_s": round(min(p.total_s for p in plains), 3),
            "max_s": round(max(p.total_s for p in plains), 3),
            "per_cell_s": [round(s, 3) for s in plain_cell_s],
            "stopped": plains[0].stopped,
        },
        "durable": {
            "total_s": durable_total,
            "min_s": round(min(d.total_s for d in durables), 3),
            "max_s": round(max(d.total_s for d in durables), 3),
            "per_cell_s": [
                round(statistics.median(d.cells[i].seconds for d in durables if i < len(d.cells)), 3)
                for i in range(len(durables[0].cells))
            ],
            "stopped": durables[0].stopped,
            "setup_s": _median([d.setup.seconds for d in durables if d.setup is not None]),
            "store_bytes": int(statistics.median(store_bytes)),
        },
        "overhead_pct": round((durable_total / plain_total - 1) * 100, 1) if plain_total else None,
        # durable_s = own_s (durable_nb's threads: its commits) + rest_s (the cell's code and the
        # threads it starts, durable_nb's work on the kernel's main thread included).
        "cpu": {"plain_s": plain_cpu, "durable_s": durable_cpu, "own_s": durable_own_cpu, "rest_s": durable_rest_cpu},
        "overhead_cpu_pct": round((durable_cpu / plain_cpu - 1) * 100, 1) if plain_cpu else None,
        "restore_all": {
            "total_s": _median([r.total_s for r in restores]),
            "restored_per_run": round(len(restored_all) / reps, 1),
            "per_cell_s": [
                round(statistics.median(r.cells[i].seconds for r in restores if i < len(r.cells)), 3)
                for i in range(len(restores[0].cells))
            ],
            "stopped": restores[0].stopped,
        },
        "imports": (
            {
                "total_s": _median(import_s),
                "statements": sum(len(ast.parse(c).body) for c in imports),
                "in_as_many_cells_s": _median(padded_s),
            }
            if time_imports
            else None
        ),
        "kill": {
            "cell": labels[victim],
            "plain_s": round(plain_cell_s[victim], 3),
            "kill_after_s": round(delay, 3),
            "outcome": outcome,
            "rerun_s": round(rerun.total_s, 3),
            "restored": restored_after_kill,
            "committed_before_rerun": committed,
            "expected_restored": committed if committed is not None else labels[:victim],
            "stopped": rerun.stopped,
        },
        "nondeterministic": {
            "variables": [_describe(n, sorted(p)) for n, p in sorted(noisy_vars.items())],
            "images": sorted(noisy_images),
        },
        "faithful": {
            "durable": _union([compare(plains[0], d, noisy_vars, noisy_images, labels) for d in durables]),
            "restore_all": _union([compare(plains[0], r, noisy_vars, noisy_images, labels) for r in restores]),
            "restore_all_vs_its_run": _union(restore_exact),
            "kill_rerun": compare(plains[0], rerun, noisy_vars, noisy_images, labels),
        },
    }


def _union(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One comparison from several reps: faithful only if every rep was; the differences of all of them."""
    merged: dict[str, Any] = {"faithful": all(r["faithful"] for r in results)}
    for key in sorted({k for r in results for k in r if k != "faithful"}):
        merged[key] = sorted({item for r in results for item in r.get(key, [])})
    return merged


def realnb_scenario(reps: int, notebooks: list[str] | None = None) -> dict[str, Any]:
    """Run the scikit-learn gallery notebooks plain and durable; timings, store sizes and faithfulness per notebook."""
    from importlib.metadata import version

    sklearn_version = version("scikit-learn")
    archive = fetch_sdist("scikit-learn", sklearn_version)
    chosen = [p for p in NOTEBOOKS if notebooks is None or Path(p).stem in notebooks or p in notebooks]
    if not chosen:
        raise ValueError(f"no notebook named {notebooks}; choose from {[Path(p).stem for p in NOTEBOOKS]}")
    sources = read_examples(archive, chosen)
    work = Path(tempfile.mkdtemp(prefix="durable-nb-realnb-"))
    started = time.perf_counter()
    results = []
    try:
        for path in chosen:
            _say(f"{path}:")
            results.append(measure_notebook(path, sources[path], reps, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "scenario": "scikit-learn gallery examples as notebooks",
        "scikit_learn": sklearn_version,
        "archive": archive.name,
        "reps": reps,
        "wall_s": round(time.perf_counter() - started, 1),
        "notebooks": results,
    }


# -- the table -----------------------------------------------------------------------------------


def _verdict(result: dict[str, Any], limit: int = 6) -> str:
    if result["faithful"]:
        return "yes"
    found = [*result.get("errors", []), *result.get("variables", [])]
    images = result.get("images", [])
    if images:
        found.append("images " + ", ".join(images))
    shown = "; ".join(found[:limit]) + ("; …" if len(found) > limit else "")
    return f"no: {shown}".replace("|", "\\|")


def _name(diff: str) -> str:
    return re.split(r"[\[ (]", diff.lstrip("+-"), maxsplit=1)[0]


def _with_own_run(versus_plain: dict[str, Any], versus_own: dict[str, Any]) -> dict[str, Any]:
    """The restore verdict: differences from the plain run, and (marked *) the others from its own durable run."""
    merged = dict(versus_plain)
    if versus_own["faithful"]:
        return merged
    merged["faithful"] = False
    names = {_name(v) for v in merged.get("variables", [])}
    merged["variables"] = [
        *merged.get("variables", []),
        *(f"{v}*" for v in versus_own["variables"] if _name(v) not in names),
    ]
    cells = {_cell(i) for i in merged.get("images", [])}
    merged["images"] = [*merged.get("images", []), *(f"{i}*" for i in versus_own["images"] if _cell(i) not in cells)]
    return merged


def _details(nb: dict[str, Any]) -> str:
    """One line of what the table leaves out for one notebook."""
    kill, data, noisy = nb["kill"], nb["data"], nb["nondeterministic"]
    downloads = data["downloads"] + data["fetched_at_run_time"]
    parts = [
        f"data {', '.join(data['datasets']) or 'none'}" + (f" (DOWNLOADS {', '.join(downloads)})" if downloads else "")
    ]
    stopped = [f"{mode} stopped at {nb[mode]['stopped']}" for mode in ("plain", "durable") if nb[mode]["stopped"]]
    parts.append("; ".join(stopped) or "runs without error")
    parts.append(f"restore-all restored {nb['restore_all']['restored_per_run']:g}/{nb['cells']} cells")
    missed = "" if kill["outcome"] == "killed in the cell" else f" ({kill['outcome']})"
    expected = kill["expected_restored"]
    if kill["cell"] in expected:
        missed += f" ({kill['cell']} had committed before the kill)"
    agrees = "as committed" if sorted(kill["restored"]) == sorted(expected) else f"but {len(expected)} were committed"
    parts.append(
        f"killed in {kill['cell']} ({kill['plain_s']:.2f} s plain) after {kill['kill_after_s']:.2f} s{missed}, "
        f"Run All again restored {len(kill['restored'])} cells, {agrees}"
    )
    cpu = nb.get("cpu", {})
    if "own_s" in cpu:
        parts.append(
            f"CPU s plain {cpu['plain_s']:.2f}, durable {cpu['durable_s']:.2f} = durable_nb's threads "
            f"{cpu['own_s']:.2f} + the rest {cpu['rest_s']:.2f}"
        )
    parts.append(f"durable (executing) vs plain: {_verdict(nb['faithful']['durable'])}")
    noise = ", ".join(noisy["variables"] + noisy["images"]) or "nothing"
    parts.append(f"nondeterministic (differs between runs of one mode): {noise}")
    return f"- **{nb['notebook']}**: " + "; ".join(parts)


def render_realnb(result: dict[str, Any]) -> str:
    """Format the realnb scenario as a Markdown table with one line of details per notebook."""
    lines = [
        f"**{result['scenario']}** (scikit-learn {result['scikit_learn']}, {result['reps']} interleaved plain/durable "
        f"runs each, medians; {result['wall_s']:.0f} s in all)",
        "",
        "| notebook | cells | plain s | durable s | overhead % | overhead CPU % | store MB | restore-all s | re-run s "
        "| imports s | imports + empty cells s | faithful after restore | faithful after kill+Run All |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for nb in result["notebooks"]:
        restore = _with_own_run(nb["faithful"]["restore_all"], nb["faithful"]["restore_all_vs_its_run"])
        overhead = "" if nb["overhead_pct"] is None else f"{nb['overhead_pct']:+.1f}"
        cpu = "" if nb.get("overhead_cpu_pct") is None else f"{nb['overhead_cpu_pct']:+.1f}"
        lines.append(
            f"| {nb['notebook']} | {nb['cells']} | {nb['plain']['total_s']:.2f} | {nb['durable']['total_s']:.2f} "
            f"| {overhead} | {cpu} | {nb['durable']['store_bytes'] / 1e6:.2f} | {nb['restore_all']['total_s']:.2f} "
            f"| {nb['kill']['rerun_s']:.2f} | {nb['imports']['total_s']:.2f} "
            f"| {nb['imports'].get('in_as_many_cells_s', float('nan')):.2f} | {_verdict(restore)} "
            f"| {_verdict(nb['faithful']['kill_rerun'])} |"
        )
    lines += [
        "",
        "(`name[part]`: the parts that differ; `*`: differs only from the durable run that committed it, "
        "not beyond what differs between two executions; `-name`: missing.)",
        "",
    ]
    lines += [_details(nb) for nb in result["notebooks"]]
    return "\n".join(lines)


def notebooks_cli(
    argv: list[str] | None,
    *,
    description: str,
    known: list[str],
    scenario: Callable[[int, list[str] | None], dict[str, Any]],
    reps: int,
    example: str,
    json_path: str,
) -> int:
    """Parse --reps/--only/--json, run a notebook scenario, print its table and write its JSON."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--reps", type=int, default=reps, help="interleaved plain/durable runs per notebook")
    parser.add_argument("--only", default=None, help=f"comma-separated notebook names, e.g. {example}")
    parser.add_argument("--json", default=json_path, help="where to write the results")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps takes a whole number >= 1")
    unknown = set(args.only.split(",")) - set(known) if args.only else set()
    if unknown:
        parser.error(f"unknown notebook(s) {sorted(unknown)}; choose from {', '.join(sorted(known))}")
    result = scenario(args.reps, args.only.split(",") if args.only else None)
    print(render_realnb(result))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the realnb scenario, print its table and write the results as JSON."""
    return notebooks_cli(
        argv,
        description=__doc__.splitlines()[0],
        known=[Path(p).stem for p in NOTEBOOKS],
        scenario=realnb_scenario,
        reps=5,
        example="plot_roc",
        json_path="benchmarks/realnb.json",
    )


if __name__ == "__main__":
    raise SystemExit(main())
