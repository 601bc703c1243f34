"""Run the snippets of the README and the docs as written: parse their fenced blocks, run them, say
where one failed.

The documents are README.md and every Markdown page under docs/ (``documents()``); pages that are
notebooks (MyST-NB ``{code-cell}`` blocks) are executed by the docs build instead, and their cells
are not read here.

A block is what a reader copies:

- ``python`` blocks run in order, the blocks of one section (a ``#`` or ``##`` heading) together (later blocks use what
  earlier ones defined), in a fresh interpreter working in an empty folder on the default store. A
  section with notebook magics (a line starting with ``%``) runs in a real IPython shell, cell by
  cell; the others run as a script would.
- ``bash`` blocks run with bash in an empty folder, the project's environment first on PATH. Each
  command must exit 0, or the code its comment names (``# exit 1: a cell failed``). ``pip
  install`` commands are not run: they must name this project and extras it has.
- ``json`` and ``yaml`` blocks must parse; ``text`` and unlabelled blocks (transcripts, diagrams) are not run.

An HTML comment on the line before a block (invisible on GitHub) says what a test cannot do as
is: ``<!-- readme-test: skip (needs an OpenAI key) -->`` (the reason is required; a skipped
python block is still compiled), or ``<!-- readme-test: setup NAME … (why) -->`` to run named
set-ups first (``SETUPS`` below: files the snippet reads, a server it talks to).

Run as a script, this module is the interpreter side of a python section (``drive``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RUN_LANGUAGES = {"python", "bash", "json", "yaml"}
QUIET_LANGUAGES = {"text", ""}
_FENCE = re.compile(r"^ {0,3}```\s*([\w+-]*)\s*$")
# Any fence, a MyST directive's (```{code-cell}) included: its lines are not headings.
_ANY_FENCE = re.compile(r"^ {0,3}```")
_DIRECTIVE = re.compile(r"^<!--\s*readme-test:\s*(.*?)\s*-->$")
_SKIP = re.compile(r"^skip\s*\((.+)\)$")
_SETUP = re.compile(r"^setup\s+([\w-]+(?:\s+[\w-]+)*)\s*(?:\(.*\))?$")
_MAGIC = re.compile(r"^\s*%", re.MULTILINE)
_EXPECTED_EXIT = re.compile(r"#\s*exit (\d+)\b")
_INSTALL = re.compile(r"^(?:\S*/)?(?:pip3?|python3? -m pip) install\b")


@dataclass(frozen=True)
class Block:
    """One fenced block of the README: where it is, what it holds, and what its directive says."""

    language: str
    code: str
    line: int  # the line of its first line of code
    section: str
    skip: str | None = None
    setups: tuple[str, ...] = ()
    document: str = "README.md"

    @property
    def magic(self) -> bool:
        """True for notebook code: IPython magics that only a shell runs."""
        return bool(_MAGIC.search(self.code))

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line} ({self.section})"


@dataclass
class Readme:
    """The blocks of a README and what could not be read in it (unknown directives, unclosed fences)."""

    blocks: list[Block] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def of(self, language: str) -> list[Block]:
        return [b for b in self.blocks if b.language == language]

    def python_sections(self) -> dict[str, list[Block]]:
        """The python blocks grouped by section, in order."""
        sections: dict[str, list[Block]] = {}
        for block in self.of("python"):
            sections.setdefault(block.section, []).append(block)
        return sections


def parse(text: str, document: str = "README.md") -> Readme:
    """Return a document's fenced blocks with their sections and directives (``document``: its path
    from the repository's root, as messages name it)."""
    found = Readme()
    lines = text.splitlines()
    section = "(introduction)"
    number = 0
    while number < len(lines):
        line = lines[number]
        number += 1
        if line.startswith("## ") or (line.startswith("# ") and document != "README.md"):
            section = line.lstrip("#").strip()
            continue
        if _ANY_FENCE.match(line) is None:
            continue
        fence = _FENCE.match(line)
        start = number
        while number < len(lines) and not lines[number].strip() == "```":
            number += 1
        if number == len(lines):
            found.problems.append(f"{document}:{start}: a block that is never closed")
            break
        if fence is None:  # a MyST directive (a notebook's code cell, a figure): the docs build runs it
            number += 1
            continue
        # A block inside a list item is indented as its fence is: that much indentation is not code.
        indent = len(line) - len(line.lstrip(" "))
        code = "\n".join(_unindented(text, indent) for text in lines[start:number]) + "\n"
        number += 1
        skip, setups = _directive(lines, start - 1, found.problems, document)
        found.blocks.append(Block(fence[1], code, start + 1, section, skip, setups, document))
    return found


def _unindented(line: str, indent: int) -> str:
    """``line`` without up to ``indent`` leading spaces (a fenced block's contents, as CommonMark reads them)."""
    return line[min(indent, len(line) - len(line.lstrip(" "))) :]


def _directive(
    lines: list[str], fence: int, problems: list[str], document: str = "README.md"
) -> tuple[str | None, tuple[str, ...]]:
    before = fence - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    match = _DIRECTIVE.match(lines[before].strip()) if before >= 0 else None
    if match is None:
        return None, ()
    text = match[1]
    if skip := _SKIP.match(text):
        return skip[1].strip(), ()
    if setup := _SETUP.match(text):
        names = tuple(setup[1].split())
        unknown = [n for n in names if n not in SETUPS]
        if unknown:
            problems.append(f"{document}:{before + 1}: no set-up named {unknown} (known: {sorted(SETUPS)})")
        return None, names
    problems.append(f"{document}:{before + 1}: cannot read {text!r}: write 'skip (why)' or 'setup NAME … (why)'")
    return None, ()


def read_readme(path: Path = README) -> Readme:
    return parse(path.read_text(), path.relative_to(ROOT).as_posix())


def documents() -> list[Path]:
    """README.md and the docs' Markdown pages (not the build's output)."""
    pages = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)
    return [README, *pages]


# -- commands of a shell block ------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command of a shell block (continuation lines joined) and the exit code it should give."""

    text: str
    line: int
    document: str = "README.md"

    @property
    def expected_exit(self) -> int:
        match = _EXPECTED_EXIT.search(self.text)
        return int(match[1]) if match else 0

    @property
    def installs(self) -> bool:
        return bool(_INSTALL.match(self.text))


def commands(block: Block) -> list[Command]:
    """Return a shell block's commands, skipping blank and comment lines."""
    found: list[Command] = []
    pending: list[str] = []
    first = block.line
    for offset, raw in enumerate(block.code.splitlines()):
        if not pending:
            first = block.line + offset
        if raw.rstrip().endswith("\\"):
            pending.append(raw.rstrip()[:-1])
            continue
        text = " ".join([*pending, raw]).strip()
        pending = []
        if text and not text.startswith("#"):
            found.append(Command(text, first, block.document))
    return found


def install_problems(command: Command) -> list[str]:
    """What is wrong with a ``pip install`` command of the README: a package that is not this project,
    or an extra that pyproject.toml does not define."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project.get("optional-dependencies", {}))
    problems = []
    words = command.text.split("#", 1)[0].split()
    targets = [w.strip("'\"") for w in words[words.index("install") + 1 :] if not w.startswith("-")]
    for target in targets:
        name, _, wanted = target.partition("[")
        if name not in (".", project["name"]):
            problems.append(
                f"{command.document}:{command.line}: installs {name!r}, not this project ({project['name']})"
            )
        unknown = [e for e in wanted.rstrip("]").split(",") if e and e not in extras]
        if unknown:
            problems.append(
                f"{command.document}:{command.line}: extras {unknown} are not in pyproject.toml ({sorted(extras)})"
            )
    return problems


# -- running ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """How a run of blocks went: its exit code and everything it printed."""

    code: int
    output: str

    @property
    def ok(self) -> bool:
        return self.code == 0


def environment(base: dict[str, str]) -> dict[str, str]:
    """The environment snippets run in: this project importable, its environment's commands first
    on PATH, the default store (no $DURABLE_NB_STORE)."""
    env = dict(base)
    env.pop("DURABLE_NB_STORE", None)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def run_python(
    blocks: list[Block], folder: Path, env: dict[str, str], timeout: float = 600, readme: Path = README
) -> Outcome:
    """Run a section's python blocks in order in a fresh interpreter working in ``folder``."""
    plan = folder.parent / f"{folder.name}-blocks.json"
    cells = [{"code": b.code, "line": b.line, "magic": b.magic} for b in blocks]
    name = blocks[0].document if blocks else "README.md"
    plan.write_text(json.dumps({"readme": str(readme), "name": name, "blocks": cells}))
    done = subprocess.run(
        [sys.executable, __file__, str(plan)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return Outcome(done.returncode, done.stdout + done.stderr)


def shell_script(block: Block) -> str:
    """The bash script that runs a block's commands, each checked against its expected exit code."""
    parts = []
    for command in commands(block):
        if command.installs:
            continue  # checked by install_problems, never run: it would change the environment
        expected = command.expected_exit
        parts.append(command.text)
        parts.append(
            f'code=$?; if [ "$code" -ne {expected} ]; then '
            f'echo "{command.document}:{command.line}: exited $code, expected {expected}" >&2; exit 1; fi'
        )
    return "\n".join(parts) + "\n"


def run_shell(block: Block, folder: Path, env: dict[str, str], timeout: float = 600) -> Outcome:
    """Run a shell block's commands with bash in ``folder``."""
    done = subprocess.run(
        ["bash", "-c", shell_script(block)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return Outcome(done.returncode, done.stdout + done.stderr)


@contextlib.contextmanager
def set_up(names: tuple[str, ...], folder: Path, env: dict[str, str]) -> Iterator[None]:
    """Run the named set-ups (files in ``folder``, variables in ``env``); undo them afterwards."""
    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(SETUPS[name](folder, env))
        yield


# -- named set-ups ------------------------------------------------------------------------------


@contextlib.contextmanager
def _orders_file(folder: Path, env: dict[str, str]) -> Iterator[None]:
    """orders.csv: the data a slow query would bring."""
    (folder / "orders.csv").write_text("order_id,region,amount\n1,EU,12.5\n2,US,8.0\n3,EU,30.25\n")
    yield


_REPORT_CELLS = [
    ("parameters", 'region = "US"\nlimit = 10'),
    ("load", 'orders = [{"region": r, "amount": a} for r, a in [("EU", 12.5), ("US", 8.0), ("EU", 30.25)]]'),
    ("report", 'picked = [o for o in orders if o["region"] == region][: int(limit)]\nprint(len(picked), "orders")'),
]
# A source that is down on the first try and up on the next, as a flaky network call would be.
_FLAKY = (
    "import pathlib\n"
    'if not pathlib.Path("source-was-down").exists():\n'
    '    pathlib.Path("source-was-down").touch()\n'
    '    raise ConnectionError("the source is down; run the notebook again")\n'
)


def _write_report(folder: Path, flaky: bool) -> None:
    import nbformat

    cells = [(tag, (_FLAKY + code) if flaky and tag == "load" else code) for tag, code in _REPORT_CELLS]
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(code, metadata={"tags": [tag]}) for tag, code in cells]
    )
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, folder / "report.ipynb")


@contextlib.contextmanager
def _report_notebook(folder: Path, env: dict[str, str]) -> Iterator[None]:
    """report.ipynb: a cell tagged parameters (region, limit), then load and report cells."""
    _write_report(folder, flaky=False)
    yield


@contextlib.contextmanager
def _flaky_report_notebook(folder: Path, env: dict[str, str]) -> Iterator[None]:
    """report.ipynb as above, whose load cell fails on the first run only (a source that was down)."""
    _write_report(folder, flaky=True)
    yield


@contextlib.contextmanager
def _scripted_openai(folder: Path, env: dict[str, str]) -> Iterator[None]:
    """OPENAI_BASE_URL and OPENAI_API_KEY point the openai client at durable_nb's scripted model server."""
    from durable_nb.demo.model_server import ModelServer, Script

    server = ModelServer(Script(turns=3, calls_per_turn=1, tools=("lookup_order",)))
    env["OPENAI_BASE_URL"] = f"{server.url}/v1"
    env["OPENAI_API_KEY"] = "scripted"
    try:
        yield
    finally:
        server.close()


SETUPS: dict[str, Callable[[Path, dict[str, str]], contextlib.AbstractContextManager[None]]] = {
    "orders-file": _orders_file,
    "report-notebook": _report_notebook,
    "flaky-report-notebook": _flaky_report_notebook,
    "scripted-openai": _scripted_openai,
}


# -- the interpreter side of a python section ---------------------------------------------------------


def drive(plan: Path) -> int:
    """Run the blocks of ``plan`` in order; on the first failure print where it is and return 1."""
    loaded = json.loads(plan.read_text())
    blocks = loaded["blocks"]
    if any(b["magic"] for b in blocks):
        return _drive_shell(blocks, loaded.get("name", "README.md"))
    import linecache
    import traceback

    # Tracebacks name the document and its lines, and show them.
    name = loaded.get("name", "README.md")
    readme = Path(loaded["readme"]).read_text().splitlines(keepends=True)
    linecache.cache[name] = (len(readme), None, readme, name)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for block in blocks:
        try:
            exec(compile("\n" * (block["line"] - 1) + block["code"], name, "exec"), namespace)
        except BaseException:  # noqa: BLE001 - whatever the snippet raised is the report
            traceback.print_exc()
            print(f"{name}:{block['line']}: this block failed", file=sys.stderr)
            return 1
    return 0


def _drive_shell(blocks: list[dict[str, Any]], name: str = "README.md") -> int:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    for block in blocks:
        result = shell.run_cell(block["code"], store_history=True)
        if not result.success:
            print(f"{name}:{block['line']}: this cell failed: {result.error_before_exec or result.error_in_exec!r}")
            return 1
    return 0


if __name__ == "__main__":
    # As for a script in the reader's folder: imports come from there, never from tests/.
    sys.path[0] = os.getcwd()
    sys.exit(drive(Path(sys.argv[1])))
