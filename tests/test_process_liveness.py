"""Whether the process that owns a run still lives: a killed process is dead even before it is reaped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from durable_nb.engine.runs.ownership import pid_alive


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_running_process_is_alive_and_an_ended_one_is_not() -> None:
    """This process lives; a child that ended and was reaped does not."""
    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not pid_alive(child.pid)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="zombies are read from /proc (Linux)")
def test_a_killed_process_not_yet_reaped_is_not_alive() -> None:
    """A killed kernel whose parent died waits for init to reap it: a zombie never renews a lease, so the
    run it owned can be taken at once (signals still reach it, which once made it look alive)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert pid_alive(child.pid)
        child.kill()
        deadline = time.monotonic() + 60
        while _state(child.pid) != "Z":  # not reaped: this test is its parent and has not waited
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            time.sleep(0.01)
        os.kill(child.pid, 0)  # a signal still reaches it
        assert not pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()
