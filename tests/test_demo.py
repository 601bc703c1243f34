"""The demo's kernel driver: each cell's status comes from that cell's own reply."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from durable_nb.demo.run import _Kernel

pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only]


def test_a_spare_reply_on_the_shell_channel_is_not_taken_for_a_cells(tmp_path: Path) -> None:
    """A slow kernel start leaves a second kernel_info reply queued (jupyter_client asks again after
    1 s); the demo once read it as the first cell's reply, so every status after it was the previous
    cell's and a paused gate read as committed."""
    kernel = _Kernel(tmp_path, dict(os.environ))
    try:
        kernel.client.kernel_info()  # a reply nobody waits for, queued before the cells' replies
        assert kernel.run("1 + 1")[0] == "ok"
        status, text = kernel.run("raise ValueError('stop here')")
        assert status == "error" and "ValueError: stop here" in text
        assert kernel.run("2 + 2")[0] == "ok"
    finally:
        kernel.close()
