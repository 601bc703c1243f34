"""Commit subjects: one line of at most 72 characters, the detail in the body.

Older history is left as it was written; the rule holds from the commit that adopted it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The last commit before the rule was adopted; every commit after it is checked.
ADOPTED_AFTER = "d3939ea"
LIMIT = 72


def git(*args: str) -> subprocess.CompletedProcess[str]:
    """Run git in the repository, capturing its output."""
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)


def test_commit_subjects_are_short() -> None:
    """Commit subjects after the rule was adopted fit in 72 characters."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: commit subjects are checked where the history is")
    if git("cat-file", "-e", f"{ADOPTED_AFTER}^{{commit}}").returncode != 0:
        pytest.skip("a shallow clone without the commit the rule starts from")
    subjects = git("log", "--format=%s", f"{ADOPTED_AFTER}..HEAD").stdout.splitlines()
    too_long = [subject for subject in subjects if len(subject) > LIMIT]
    assert too_long == []
