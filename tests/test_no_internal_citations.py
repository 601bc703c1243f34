"""Every tracked file stands on its own: none cites the maintainers' design notes, which are not in
the repository, by file name, section sign or contract id. Tests, examples and docs say the
behaviour in words, or point to a section of the README by its heading."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# This file holds examples of what it looks for, so the scan of the repository leaves it out.
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()

# The notes' file named in any case, or its name in capitals as a word.
DESIGN_FILE = re.compile(r"(?i:design\.md)|\bDESIGN\b")
SECTION_SIGN = re.compile("\u00a7")
# A contract id: a letter for the engine, the notebook or the workflow API and its number, alone or
# as part of a name (underscores count as a boundary); "N-contracts" is the same citation in brief.
CONTRACT_ID = re.compile(
    r"(?<![A-Za-z0-9])(?:C(?:1[0-9]|[1-9])|N(?:1[0-3]|[1-9])|W[1-4])(?![A-Za-z0-9])|\b[CNW]-contracts?\b"
)


def _names_control_characters(line: str, found: str) -> bool:
    """Whether ``found`` is Unicode's C1 set of control characters, as the line's wording shows."""
    return found == "C1" and ("C0" in line or "control" in line.lower())


def citations(text: str) -> list[tuple[int, str]]:
    """The (line number, text) of every citation of the design notes in ``text``."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for pattern in (DESIGN_FILE, SECTION_SIGN, CONTRACT_ID):
            for match in pattern.finditer(line):
                if not _names_control_characters(line, match.group()):
                    found.append((number, match.group()))
    return found


def _tracked_files() -> list[str]:
    """The repository's tracked files, relative to its root; skips the test outside a git checkout."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [name for name in listed.stdout.decode().split("\0") if name]


def _texts(name: str) -> list[tuple[str, str]]:
    """(where, text) pairs to scan in one tracked file: a notebook's cell sources, a text file whole."""
    path = ROOT / name
    if not path.is_file():
        return []  # deleted in the working tree, not yet in the index
    data = path.read_bytes()
    if b"\0" in data:
        return []  # a binary file (images, the SQLite fixtures)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return []
    if name.endswith(".ipynb"):
        # Outputs are what the code printed (or image data); the code itself is scanned where it lives.
        cells = json.loads(text)["cells"]
        return [(f"{name} cell {index}", "".join(cell["source"])) for index, cell in enumerate(cells)]
    return [(name, text)]


def test_no_tracked_file_cites_the_design_notes() -> None:
    """No tracked file cites the design notes; each place that did now says what it meant in words."""
    names = [name for name in _tracked_files() if name != SELF]
    assert any(name.startswith("tests/") for name in names)
    found = [
        f"{where}:{number}: {text}"
        for name in names
        for where, body in _texts(name)
        for number, text in citations(body)
    ]
    assert not found, "Say the behaviour in words or name a README section instead of:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "text",
    [
        "The workflow of DESIGN.md section 6.",
        "see the design.md notes",
        "(DESIGN, atomic claim)",
        "Store rules (§3).",
        '"""C4: 16 processes approve the same paused run."""',
        "C11, N8: interrupting the process",
        "W3: sync calls just work",
        "# -- W1 / C1: parallel waves ---",
        "Executors (C1-C8, C13, W1-W2).",
        "C15_EVENTS = {",
        "Run All resumes the cell (N-contracts).",
    ],
)
def test_each_kind_of_citation_is_found(text: str) -> None:
    """File names, section signs, contract ids (in ranges and names too) are all found."""
    assert citations(text)


@pytest.mark.parametrize(
    "text",
    [
        "# C0 controls, DEL and C1 controls (Unicode category Cc): shown as escapes.",
        "json.dumps escapes C0 itself; DEL and C1 only occur inside JSON strings.",
        "a C1 control (U+009B is a CSI to some terminals)",
        "def test_json_output_keeps_the_text_and_escapes_c1():",
        "at_n2 = point['step'] == 'after:n2'",
        "W3C, C20, N14 and W5 are no contract ids; neither is a design choice.",
    ],
)
def test_what_is_not_a_citation_is_allowed(text: str) -> None:
    """Unicode's control sets, node names and other words that merely look alike are no citations."""
    assert citations(text) == []
