"""A test session leaves nothing behind: no process it started still runs, no repository file changed.

Tests write only to their temporary folders and stop what they start. This plugin checks both
when the session ends, after every fixture is torn down:

- every process that inherited this session's marker variable (kernels, servers, workers, even
  those re-parented to init) or that descends from the pytest process must be gone; one that is
  still there after a short wait for those already stopping is named, killed (so that it cannot
  hold the run open) and fails the session. The resource trackers of multiprocessing and loky are
  not counted: pytest's own helpers, they end with it;
- ``git status`` of the checkout holding the tests must read as it did when the session began (a
  test that rewrote a tracked file, or left a new one in the repository, fails the session).

Loaded by ``conftest.py``; ``tests/test_session_hygiene.py`` runs it on sessions that break each rule.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

MARKER = "DURABLE_NB_TEST_SESSION"
# Processes told to stop in a fixture's teardown may take a moment to exit; beyond this they stay.
GRACE_ENV = "DURABLE_NB_TEST_EXIT_GRACE"
_EXIT_GRACE_SECONDS = float(os.environ.get(GRACE_ENV, "10"))
_FINDINGS = pytest.StashKey[list[str]]()
_START = pytest.StashKey[tuple[str, str | None]]()


def _git_status(root: Path) -> str | None:
    """The checkout's ``git status`` (untracked files listed one by one), or None outside one."""
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain=v1", "--untracked-files=all"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _state(pid: int) -> tuple[int, str] | None:
    """A process's parent and state letter (from /proc), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0]


def _marked(pid: int, token: str) -> bool:
    try:
        return f"{MARKER}={token}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


# multiprocessing's and loky's trackers of shared resources: started for pytest itself, they read a
# pipe from it and end when it does.
_HELPERS = ("multiprocessing.resource_tracker import main", "loky.backend.resource_tracker import main")


def session_processes(token: str) -> dict[int, str]:
    """The live processes this session started: descendants of this process, or marked with ``token``."""
    me = os.getpid()
    states = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _state(int(p))) is not None}
    found: set[int] = set()
    for pid, (_, letter) in states.items():
        if pid == me or letter in ("Z", "X"):  # a zombie has ended; only its parent's reaping is left
            continue
        ancestor, seen = pid, 0
        while ancestor > 1 and ancestor != me and seen < 64:
            ancestor, seen = states.get(ancestor, (0, ""))[0], seen + 1
        if ancestor == me or _marked(pid, token):
            found.add(pid)
    commands = {pid: _command(pid) for pid in sorted(found)}
    return {
        pid: command
        for pid, command in commands.items()
        if not (states[pid][0] == me and any(helper in command for helper in _HELPERS))
    }


def pytest_configure(config: pytest.Config) -> None:
    token = uuid.uuid4().hex
    os.environ[MARKER] = token  # every process the tests start inherits it
    config.stash[_START] = (token, _git_status(config.rootpath))
    config.stash[_FINDINGS] = []


# Last, after every other plugin's session finish: under pytest-xdist the controller's workers are
# its children, and xdist stops them in its own. (Each worker makes its own token in its
# pytest_configure, so it checks only what its tests started.)
@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _START not in config.stash or not Path("/proc").is_dir():
        return
    token, status_before = config.stash[_START]
    findings = config.stash[_FINDINGS]
    deadline = time.monotonic() + _EXIT_GRACE_SECONDS
    left = session_processes(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = session_processes(token)
    for pid, command in left.items():
        findings.append(f"process {pid} outlived the session (killed now): {command[:300]}")
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    status_after = _git_status(config.rootpath)
    if status_before is not None and status_after != status_before:
        changed = sorted(set((status_after or "").splitlines()) ^ set(status_before.splitlines()))
        findings.append(f"the session changed the repository (tests must write only to tmp_path): {changed}")
    if findings and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    findings = terminalreporter.config.stash.get(_FINDINGS, [])
    if findings:
        terminalreporter.section("left behind by the session", red=True)
        for finding in findings:
            terminalreporter.line(finding, red=True)
