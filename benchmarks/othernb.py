"""Another library's example notebooks, run plain and durable as ``realnb`` runs scikit-learn's.

``python -m benchmarks.othernb [--reps N] [--only NAME] [--json PATH]``

A second measurement set that durable_nb was not tuned on: statsmodels' own example notebooks
(``examples/notebooks/*.ipynb`` in its source archive, fetched from the package index pip is
configured with and cached, never built), for the installed statsmodels. Their code cells become
the notebook's cells (IPython magics and shell lines left out: ipykernel's inline backend is the
default already); each notebook is then measured exactly as ``realnb`` measures a gallery
example: plain and durable interleaved, restore-all, imports alone, kill + Run All, and every
variable and image compared with the plain run.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from .realnb import _say, fetch_sdist, measure_notebook, notebooks_cli

# Examples on data statsmodels ships (nothing downloaded), with fitted models and figures.
NOTEBOOKS = (
    "ols",
    "glm",
    "wls",
    "regression_plots",
    "robust_models_0",
    "quantile_regression",
    "kernel_density",
    "tsa_arma_0",
)


# Cell magics whose body is Python still; any other (``%%javascript``, ``%%bash``) leaves its cell out.
_PYTHON_CELL_MAGICS = frozenset({"%%time", "%%timeit", "%%capture"})


def read_notebooks(archive: Path, names: list[str]) -> dict[str, str]:
    """Each ``examples/notebooks/<name>.ipynb`` of a source archive as a percent-format script."""
    found: dict[str, str] = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            path = Path(member.name)
            if path.parent.name == "notebooks" and path.suffix == ".ipynb" and path.stem in names:
                handle = tar.extractfile(member)
                if handle is not None:
                    found[path.stem] = as_script(json.loads(handle.read()))
    missing = set(names) - set(found)
    if missing:
        raise RuntimeError(f"{archive.name} has no examples/notebooks/{', '.join(sorted(missing))}.ipynb")
    return found


def as_script(notebook: dict[str, Any]) -> str:
    """The code cells of a notebook, ``# %%`` between them, without IPython magics, shell lines or non-Python cells."""
    cells = []
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        magic = source.lstrip().split(None, 1)[0] if source.strip() else ""
        if magic.startswith("%%") and magic not in _PYTHON_CELL_MAGICS:
            continue  # a cell of JavaScript, HTML or shell: not Python, and not the notebook's values
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        if any(line.strip() for line in lines):
            cells.append("\n".join(lines))
    return "".join(f"# %%\n{text}\n" for text in cells)


def othernb_scenario(reps: int, notebooks: list[str] | None = None) -> dict[str, Any]:
    """Run statsmodels' example notebooks plain and durable; the realnb measurements for each."""
    from importlib.metadata import version

    statsmodels_version = version("statsmodels")
    archive = fetch_sdist("statsmodels", statsmodels_version)
    chosen = [n for n in NOTEBOOKS if notebooks is None or n in notebooks]
    sources = read_notebooks(archive, chosen)
    work = Path(tempfile.mkdtemp(prefix="durable-nb-othernb-"))
    started = time.perf_counter()
    results = []
    try:
        for name in chosen:
            _say(f"{name}:")
            results.append(measure_notebook(f"{name}.ipynb", sources[name], reps, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "scenario": "statsmodels example notebooks",
        # render_realnb names the library's version under this key.
        "scikit_learn": f"statsmodels {statsmodels_version}",
        "archive": archive.name,
        "reps": reps,
        "wall_s": round(time.perf_counter() - started, 1),
        "notebooks": results,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the othernb scenario, print its table and write the results as JSON."""
    return notebooks_cli(
        argv,
        description=__doc__.splitlines()[0],
        known=list(NOTEBOOKS),
        scenario=othernb_scenario,
        reps=3,
        example="ols,glm",
        json_path="benchmarks/othernb.json",
    )


if __name__ == "__main__":
    raise SystemExit(main())
