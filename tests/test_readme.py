"""Every command and snippet in the README and the docs' Markdown pages runs as written.

A newcomer reads the README and the docs and tries every example; so does this test, through
``readmekit`` (how blocks are found, run, skipped or set up is described there). Each python
section, each shell block and each JSON block is a test of its own, named after its page and
section; a failure names the line that failed. The docs' notebook pages are executed by the docs
build. The two set-up commands at the top create virtual
environments and install, so they are checked rather than run here (``.ci/run`` runs the second;
``.ci/readme-first-command`` runs the first in a fresh clone).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tomllib
from pathlib import Path

import pytest
from readmekit import (
    QUIET_LANGUAGES,
    ROOT,
    RUN_LANGUAGES,
    SETUPS,
    Block,
    commands,
    documents,
    environment,
    install_problems,
    parse,
    read_readme,
    run_python,
    run_shell,
    set_up,
)

from durable_nb.cli import COMMANDS

pytestmark = pytest.mark.slow

READ = read_readme()
PAGES = {path.relative_to(ROOT).as_posix(): read_readme(path) for path in documents()}


# Sections whose snippets other items of issue 27 fix at the same time (the service's curl examples,
# the LangGraph saver's history): not run until those land; remove an entry when its fix does.
def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40]


def _python_cases() -> list[object]:
    cases = []
    for name, read in PAGES.items():
        for section, blocks in read.python_sections().items():
            cases.append(pytest.param(section, blocks, id=f"{_page(name)}{_slug(section)}"))
    return cases


def _page(name: str) -> str:
    """A test id's prefix naming a docs page (none for the README, whose ids stay as they were)."""
    return "" if name == "README.md" else _slug(name.removeprefix("docs/").removesuffix(".md")) + "-"


def _shell_cases() -> list[object]:
    return [
        pytest.param(block, id=f"{_page(name)}{_slug(block.section)}-L{block.line}")
        for name, read in PAGES.items()
        for block in read.of("bash")
    ]


@pytest.mark.parametrize(("section", "blocks"), _python_cases())
def test_python_snippets_run_as_written(section: str, blocks: list[Block], tmp_path: Path) -> None:
    """The section's python blocks run in order in a fresh interpreter (an IPython shell when they use
    magics), in an empty folder on the default store; skipped blocks only compile."""
    runnable = [b for b in blocks if b.skip is None]
    for block in blocks:
        if block.skip is not None:
            _compiles(block)
    if not runnable:
        pytest.skip(f"every python block of this section is skipped: {blocks[0].skip}")
    folder = tmp_path / "work"
    folder.mkdir()
    env = environment(dict(os.environ))
    with set_up(tuple(name for b in runnable for name in b.setups), folder, env):
        outcome = run_python(runnable, folder, env, readme=ROOT / blocks[0].document)
    assert outcome.ok, outcome.output


def _compiles(block: Block) -> None:
    from IPython.core.inputtransformer2 import TransformerManager

    compile(TransformerManager().transform_cell(block.code), block.where, "exec")


@pytest.mark.parametrize("block", _shell_cases())
def test_shell_snippets_run_as_written(block: Block, tmp_path: Path) -> None:
    """The block's commands run with bash in an empty folder, each giving the exit code its comment
    names (0 unless '# exit N'); its pip install commands name this project and real extras."""
    problems = [p for c in commands(block) if c.installs for p in install_problems(c)]
    assert not problems, problems
    if block.skip is not None:
        pytest.skip(block.skip)
    folder = tmp_path / "work"
    folder.mkdir()
    env = environment(dict(os.environ))
    with set_up(block.setups, folder, env):
        outcome = run_shell(block, folder, env)
    assert outcome.ok, outcome.output


def test_json_snippets_parse() -> None:
    """Configuration shown as JSON is JSON."""
    for read in PAGES.values():
        for block in read.of("json"):
            json.loads(block.code)


def test_yaml_snippets_parse() -> None:
    """Configuration shown as YAML (a Prometheus scrape, a compose file) is YAML."""
    yaml = pytest.importorskip("yaml", reason="PyYAML comes with the headless extra")
    blocks = [block for read in PAGES.values() for block in read.of("yaml")]
    assert blocks
    for block in blocks:
        assert isinstance(yaml.safe_load(block.code), dict)


def test_every_block_is_run_checked_or_skipped_with_a_reason() -> None:
    """Every block's language is one the test runs or one that is not code (a transcript, a diagram);
    every directive is understood and names set-ups that exist; a skip says why."""
    blocks = [b for read in PAGES.values() for b in read.blocks]
    problems = [p for read in PAGES.values() for p in read.problems]
    assert not problems, problems
    languages = {b.language for b in blocks}
    assert languages <= RUN_LANGUAGES | QUIET_LANGUAGES, languages - RUN_LANGUAGES - QUIET_LANGUAGES
    assert all(b.skip.strip() for b in blocks if b.skip is not None)
    assert {n for b in blocks for n in b.setups} <= set(SETUPS)


def test_the_setup_commands_are_two_and_name_real_extras_and_commands() -> None:
    """The README opens with exactly two commands, each: a new venv, an editable install with extras
    pyproject.toml has, then a command the environment provides (durable-nb's demo, pytest from the dev
    extra). The second is what .ci/run runs."""
    first = READ.blocks[0]
    assert first.language == "bash" and first.skip, "the set-up commands come first and are not run here"
    lines = commands(first)
    assert len(lines) == 2, [c.text for c in lines]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for command in lines:
        venv, install, run = (shlex.split(part) for part in command.text.split("&&"))
        assert venv == ["python3", "-m", "venv", ".venv"]
        assert install[:3] == [".venv/bin/pip", "install", "-e"], install
        target = install[3]
        wanted = re.fullmatch(r"\.(?:\[([\w,]+)\])?", target)
        assert wanted, target
        assert set(filter(None, (wanted[1] or "").split(","))) <= set(extras), target
        if run[0] == ".venv/bin/durable-nb":
            assert "durable-nb" in project["scripts"] and run[1] in {name for name, *_ in COMMANDS}
        else:
            assert run == [".venv/bin/python", "-m", "pytest"]
            assert any(r.startswith("pytest") for r in extras[wanted[1]]), "pytest comes with the dev extra"
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/python -m pip install --quiet -e '.[dev]'" in ci and "\n.venv/bin/python -m pytest\n" in ci


def test_every_durable_nb_command_the_readme_names_exists() -> None:
    """Each ``durable-nb WORD`` in the README and the docs, in prose or in a block, is one of the CLI's commands."""
    named = {word for path in documents() for word in re.findall(r"durable-nb ([a-z][\w-]*)", path.read_text())}
    assert named - {name for name, *_ in COMMANDS} == set()


# -- the harness itself ---------------------------------------------------------------------------

BROKEN = """# A README

## Plain python

```python
total = 1 + 1
```

```python
print(totl)
```

## Notebook

```python
%load_ext durable_nb
%durable run broken-demo
```

```python
%%durable step
raise RuntimeError("a broken cell")
```

## Shell

```bash
echo fine
false
```

```bash
true   # exit 3: the comment promises another code
```

<!-- readme-test: skip (shows what a skip does: this never runs) -->
```bash
false
```

<!-- readme-test: setup orders-file (orders.csv) -->
```bash
test -f orders.csv
```

<!-- readme-test: please run this -->
```python
x = 1
```
"""


def test_the_harness_fails_a_broken_snippet_and_says_where(tmp_path: Path) -> None:
    """A snippet that raises, a notebook cell that fails, a command that exits non-zero or with another
    code than its comment promises: each fails its test and names its README line. A skipped block is
    not run, a set-up runs first, an unreadable directive is reported."""
    fake = tmp_path / "README.md"
    fake.write_text(BROKEN)
    read = parse(BROKEN)
    assert read.problems == ["README.md:46: cannot read 'please run this': write 'skip (why)' or 'setup NAME … (why)'"]
    env = environment(dict(os.environ))
    sections = read.python_sections()

    def folder(name: str) -> Path:
        (tmp_path / name).mkdir()
        return tmp_path / name

    plain = run_python(sections["Plain python"], folder("plain"), env, readme=fake)
    assert not plain.ok and "README.md:10: this block failed" in plain.output and "NameError" in plain.output
    assert 'File "README.md", line 10' in plain.output and "print(totl)" in plain.output
    notebook = run_python(sections["Notebook"], folder("notebook"), env, readme=fake)
    assert not notebook.ok and "README.md:21: this cell failed" in notebook.output, notebook.output
    assert "a broken cell" in notebook.output
    assert run_python(sections["Notebook"][:1], folder("notebook-ok"), env, readme=fake).ok

    fails, promises, skipped, set_up_block = read.of("bash")
    outcome = run_shell(fails, folder("fails"), env)
    assert not outcome.ok and "README.md:29: exited 1, expected 0" in outcome.output
    outcome = run_shell(promises, folder("promises"), env)
    assert not outcome.ok and "README.md:33: exited 0, expected 3" in outcome.output
    assert skipped.skip == "shows what a skip does: this never runs"
    work = folder("set-up")
    assert not run_shell(set_up_block, work, env).ok
    with set_up(set_up_block.setups, work, env):
        assert run_shell(set_up_block, work, env).ok
    # A block in a list item is indented as its fence: that indentation is not the code's.
    (listed,) = parse("## List\n\n- an item:\n\n  ```python\n  if True:\n      x = 1\n  ```\n").of("python")
    assert listed.code == "if True:\n    x = 1\n"
    installing = parse("## Install\n\n```bash\npip install 'durable-nb[nope]'   # an extra\n```\n").of("bash")
    (install,) = commands(installing[0])
    assert install.installs and "extras ['nope'] are not in pyproject.toml" in install_problems(install)[0]
