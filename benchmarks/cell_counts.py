"""What durable_nb adds to attaching and to a cell that changed nothing, counted in real kernels.

``python -m benchmarks.cell_counts [--cells N] [--imports CODE] [--body CODE] [--against PATH]``

Nothing here is timed: each figure is a count of CPU instructions, the same on a loaded machine.
Fresh ipykernel kernels run under ``valgrind --tool=callgrind`` (which must be installed), one
plain and one durable (``--against PATH``: a folder holding another durable_nb, say an older
commit's, runs durable too). Each kernel runs ``--imports`` first, uncounted; then, counted from
there on, ``%load_ext durable_nb`` and ``%durable run`` (two ``pass`` cells in the plain kernel);
then, after three cells to warm up, ``--cells`` cells of ``--body`` (each with a comment of its
own, as new text), as ``%%durable`` cells in the durable kernel. All the kernel's threads count
(ipykernel's IO thread too). Printed: the instructions attaching adds, and those each cell adds,
over the plain kernel's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .realnb import compile_package

IMPORTS = "import numpy as np\nimport matplotlib.pyplot as plt\nimport sklearn.linear_model"


def _kernelspec(folder: Path, out: Path) -> None:
    """A kernelspec ``counted`` in ``folder``: this interpreter's ipykernel under callgrind, counting nothing yet."""
    spec = folder / "kernels" / "counted"
    spec.mkdir(parents=True)
    argv = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}/callgrind.%p",
        sys.executable,
        "-m",
        "ipykernel_launcher",
        "-f",
        "{connection_file}",
    ]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "counted", "language": "python"}))


def _total(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no total in {path}")


def count(mode: str, pythonpath: str | None, cells: int, imports: str, body: str) -> tuple[int, int]:
    """One kernel's instructions: (attaching, all ``cells`` cells)."""
    from jupyter_client.manager import KernelManager

    folder = Path(tempfile.mkdtemp(prefix="durable-nb-counts-"))
    out = folder / "out"
    out.mkdir()
    _kernelspec(folder, out)
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)  # ipykernel's default: the inline backend
    env["DURABLE_NB_STORE"] = f"sqlite:///{folder}/runs.db"
    env["JUPYTER_PATH"] = str(folder)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    os.environ["JUPYTER_PATH"] = str(folder)  # where this process's kernel manager finds the spec
    manager = KernelManager(kernel_name="counted")
    with open(folder / "kernel.log", "ab") as log:  # valgrind's own notes, not the cells'
        manager.start_kernel(cwd=str(folder), env=env, stdout=log, stderr=log)
    pid = manager.provisioner.process.pid  # type: ignore[union-attr]
    client = manager.client()
    client.start_channels()

    def run(code: str) -> None:
        reply = client.execute_interactive(code, timeout=900, output_hook=lambda message: None)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"{mode}: {code.splitlines()[0]!r} failed: {reply['content'].get('evalue')}")

    def control(*args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)

    try:
        client.wait_for_ready(timeout=900)
        run(imports or "pass")
        control("-i", "on")
        if mode == "plain":
            run("pass  # a")
            run("pass  # b")
        else:
            run("%load_ext durable_nb")
            run("%durable run counted")
        control("-d")
        head = "" if mode == "plain" else "%%durable c{}\n"
        for index in range(3 + cells):
            if index == 3:
                control("-z")
            run(head.format(index) + f"{body}  # {index}")
        control("-d")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    dumps = sorted(out.glob(f"callgrind.{pid}.*"), key=lambda path: int(path.suffix[1:]))
    attach, counted = _total(dumps[0]), _total(dumps[-1])
    shutil.rmtree(folder, ignore_errors=True)
    return attach, counted


def main(argv: list[str] | None = None) -> int:
    """Count plain and durable kernels and print what durable_nb adds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10, help="no-change cells counted per kernel")
    parser.add_argument("--imports", default=IMPORTS, help="code run first, uncounted ('' for none)")
    parser.add_argument("--body", default="pass", help="the code of each counted cell (it must change nothing)")
    parser.add_argument("--against", default=None, help="a folder holding another durable_nb, to compare with")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        parser.error("valgrind (with callgrind_control) is not installed")
    here = str(Path(__file__).resolve().parent.parent)
    modes = {"plain": None, "durable": here}
    if args.against is not None:
        modes["against"] = args.against
    for path in modes.values():
        if path is not None:
            compile_package(Path(path) / "durable_nb")
    counts = {mode: count(mode, path, args.cells, args.imports, args.body) for mode, path in modes.items()}
    plain_attach, plain_cells = counts["plain"]
    for mode in modes:
        if mode != "plain":
            attach, cells = counts[mode]
            print(
                f"{mode}: attaching adds {(attach - plain_attach) / 1e6:.2f}M instructions, "
                f"a no-change cell {(cells - plain_cells) / args.cells / 1e6:.3f}M"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
