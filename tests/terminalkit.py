"""Terminals for tests: what a child draws on a pseudo-terminal, and ``ipython`` typed at as a person would."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import threading
import time
from pathlib import Path

# Colour, cursor and title sequences prompt_toolkit draws with; the text between them is what a person reads.
_ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_SUBMIT = b"\x1b\r"  # Esc, Enter: prompt_toolkit runs the cell as typed (a cell magic ends no other way)


class Terminal:
    """A pseudo-terminal of ``rows`` x ``columns`` for a child process (pass ``fd`` as its stdout or stderr)."""

    def __init__(self, rows: int = 40, columns: int = 120) -> None:
        self._master, self.fd = pty.openpty()
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self._drawn: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)

    def handed_over(self) -> None:
        """Close this process's end of the child's side (the child holds it now) and read what it draws."""
        os.close(self.fd)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 4096)
            except OSError:  # every writer closed the terminal
                return
            if not chunk:
                return
            self._drawn.append(chunk)

    def drawn(self) -> str:
        """Everything drawn on the terminal, once the child has exited."""
        self._reader.join(timeout=60)
        os.close(self._master)
        return b"".join(self._drawn).decode(errors="replace")


class TerminalIPython:
    """One ``ipython`` process in a pseudo-terminal, working in ``folder``."""

    def __init__(self, folder: Path, env: dict[str, str], timeout: float = 120) -> None:
        self.timeout = timeout
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the terminal program itself
            os.chdir(folder)
            os.execve(
                sys.executable,
                [sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor", "--no-confirm-exit"],
                {**env, "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm"},
            )
        self.raw = b""
        self.cells = 0
        self._wait_for(rb"In \[1\]:")

    def _read(self, deadline: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            try:
                self.raw += os.read(self.fd, 65536)
            except OSError:  # the terminal closed: the program exited
                raise EOFError(self.text) from None

    @property
    def text(self) -> str:
        """Everything the terminal showed so far, without its control sequences."""
        return _ESCAPES.sub(b"", self.raw).replace(b"\r", b"").decode(errors="replace")

    def _wait_for(self, pattern: bytes, start: int = 0) -> int:
        deadline = time.monotonic() + self.timeout
        compiled = re.compile(pattern)
        while True:
            found = compiled.search(_ESCAPES.sub(b"", self.raw), start)
            if found:
                return found.end()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {pattern!r} in {self.timeout} s; the terminal showed:\n{self.text}")
            self._read(deadline)

    def cell(self, source: str) -> str:
        """Type a cell, run it, and return what it printed (up to the next prompt)."""
        self.cells += 1
        before = len(_ESCAPES.sub(b"", self.raw))
        os.write(self.fd, source.encode() + _SUBMIT)
        prompt = rb"In \[%d\]:" % (self.cells + 1)
        end = self._wait_for(prompt, before)
        shown = _ESCAPES.sub(b"", self.raw)[before:end].replace(b"\r", b"").decode(errors="replace")
        # What the cell printed follows the last echo of its source.
        last_line = source.splitlines()[-1].encode()
        start = shown.encode().rfind(last_line)
        return shown.encode()[start + len(last_line) :].decode(errors="replace")

    def close(self) -> None:
        """Leave IPython, or kill it if it does not go."""
        try:
            os.write(self.fd, b"exit" + _SUBMIT)
            deadline = time.monotonic() + self.timeout
            while True:
                self._read(deadline)
                if time.monotonic() > deadline:
                    os.kill(self.pid, signal.SIGKILL)
                    break
        except (EOFError, OSError):
            pass
        os.waitpid(self.pid, 0)
        os.close(self.fd)
