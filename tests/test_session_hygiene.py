"""A test session leaves nothing behind (tests/sessioncheck.py), checked on small sessions of its own.

The suite once rewrote four tracked screenshots in docs/ on every run, and pytest stayed alive
for about 50 s after printing its summary. Each session here is a real pytest process with the
session check loaded, in a throwaway git repository: a session that rewrites a tracked file, or
leaves a process running (even one in a session of its own, re-parented away from pytest), fails
and says what it left; the process is killed; a clean session passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sessioncheck import GRACE_ENV

TESTS = Path(__file__).resolve().parent


def _repository(tmp_path: Path, test_source: str) -> Path:
    """A git repository with one tracked file and one test file (both committed)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pytest.ini").write_text("[pytest]\n")
    (repo / "data.txt").write_text("tracked\n")
    (repo / "test_one.py").write_text(textwrap.dedent(test_source))
    for command in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", "start"],
    ):
        subprocess.run(command, cwd=repo, check=True, capture_output=True)
    return repo


def _session(repo: Path, *options: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(TESTS) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only the session check: a quick session
    env[GRACE_ENV] = "0"  # the leaked process sleeps for 10 minutes: no need to wait for it
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "sessioncheck", "-p", "no:cacheprovider", "-q", *options, "test_one.py"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_clean_session_passes(tmp_path: Path) -> None:
    """Tests that write to tmp_path and stop what they start leave nothing to report."""
    repo = _repository(
        tmp_path,
        """
        import subprocess

        def test_tidy(tmp_path):
            (tmp_path / "out.txt").write_text("fine")
            subprocess.run(["true"], check=True)
        """,
    )
    done = _session(repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "left behind" not in done.stdout


def test_a_clean_session_on_two_workers_passes(tmp_path: Path) -> None:
    """Under pytest-xdist the workers are the session's own children: they are not counted as left
    behind, because the check runs after xdist has stopped them."""
    repo = _repository(
        tmp_path,
        """
        import subprocess

        def test_one():
            subprocess.run(["true"], check=True)

        def test_two():
            subprocess.run(["true"], check=True)
        """,
    )
    done = _session(repo, "-p", "xdist.plugin", "-n", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout and "left behind" not in done.stdout


def test_a_session_that_rewrites_a_tracked_file_fails(tmp_path: Path) -> None:
    """Rewriting a tracked file (as the screenshots in docs/ were) or leaving a new file in the
    repository fails the session, naming them, although every test passed."""
    repo = _repository(
        tmp_path,
        """
        from pathlib import Path

        def test_writes_into_the_repository():
            Path("data.txt").write_text("rewritten by a test\\n")
            Path("stray.png").write_bytes(b"png")
        """,
    )
    done = _session(repo)
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert "the session changed the repository" in done.stdout
    assert "data.txt" in done.stdout and "stray.png" in done.stdout


@pytest.mark.parametrize("own_session", [False, True], ids=["child", "own-session"])
def test_a_session_that_leaves_a_process_running_fails_and_the_process_is_killed(
    tmp_path: Path, own_session: bool
) -> None:
    """A process a test started and never stopped fails the session and is killed, whether it is
    still pytest's child or has a session of its own (found by the variable it inherited)."""
    repo = _repository(
        tmp_path,
        f"""
        import subprocess
        from pathlib import Path

        def test_leaks():
            leaked = subprocess.Popen(["sleep", "600"], start_new_session={own_session})
            Path("{tmp_path}/pid").write_text(str(leaked.pid))
        """,
    )
    done = _session(repo)
    pid = int((tmp_path / "pid").read_text())
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr
    assert f"process {pid} outlived the session (killed now): sleep 600" in done.stdout
    state = Path(f"/proc/{pid}/stat")
    assert not state.exists() or state.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
