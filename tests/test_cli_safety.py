"""issue 15: CLI prints one clean, escaped line per error.

Whatever the store holds (a run's name, a node's error text, a gate's reason) reaches the terminal
with its control characters escaped, so it can neither drive the terminal nor forge a line. Every
failure, expected or not, is one line on stderr (a JSON object with --json) and an exit code,
never a traceback. ``show --last`` takes only whole numbers of 1 or more, and ``fork --set`` keeps
each value's type at the fork point.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durable_nb as dnb
from durable_nb.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_STATE, EXIT_USAGE, main, printable
from durable_nb.store import disconnect

HOSTILE_NAME = "x\x1b]0;PWNED\x07\x1b[2J"
HOSTILE_ERROR = "\r\nFAKE: run completed OK"
HOSTILE_REASON = "ok?\x1b[1A\rFAKE: approved"


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    """A SQLite store of its own for one test."""
    store_url = f"sqlite:///{tmp_path}/r.db"
    yield store_url
    disconnect(store_url)


def failed_run(url: str) -> dnb.Run:
    """A run with a hostile name whose second node failed with a hostile error text."""
    flow = dnb.Workflow(HOSTILE_NAME, store=url)

    @flow.node()
    def prepare(state: dict[str, Any]) -> dict[str, Any]:
        return {"x": 1}

    @flow.node(after="prepare", retry_count=0)
    def explode(state: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError(HOSTILE_ERROR)

    run = flow.run({})
    assert run.status == "failed"
    return run


def paused_run(url: str) -> dnb.Run:
    """A run with a hostile name waiting at a gate with a hostile reason; ``x`` is an int."""
    flow = dnb.Workflow(HOSTILE_NAME, store=url)

    @flow.node()
    def prepare(state: dict[str, Any]) -> dict[str, Any]:
        return {"x": 1, "label": "text"}

    @flow.node(after="prepare")
    def review(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": dnb.gate(HOSTILE_REASON, {}).approved}

    run = flow.run({})
    assert run.status == "paused"
    return run


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the command line; return its exit code, stdout and stderr."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_clean(text: str) -> None:
    """No control character but the newlines that end lines reaches the terminal."""
    raw = sorted({c for c in text if c != "\n" and unicodedata.category(c) == "Cc"})
    assert raw == [], f"raw control characters {raw!r} in {text!r}"


def assert_one_line(text: str) -> None:
    """Exactly one clean line, without a traceback."""
    assert_clean(text)
    assert text.count("\n") == 1 and text.endswith("\n"), text
    assert "Traceback" not in text


def fork_count(url: str) -> int:
    return len(dnb.runs(store=url))


def test_printable_escapes_every_control_character() -> None:
    """C0, DEL and C1 controls become visible escapes; other text is unchanged."""
    assert printable("a\x1b[2J\r\n\t\x07\x00\x7f\x9bü ok") == "a\\x1b[2J\\r\\n\\t\\x07\\x00\\x7f\\x9bü ok"
    assert printable("plain text, ünïcode — fine") == "plain text, ünïcode — fine"


def test_hostile_name_and_error_are_escaped(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """runs, show and history print a hostile name and error text escaped, forging no line."""
    run = failed_run(url)
    for command in (["runs"], ["show", run.id], ["history", run.id]):
        code, out, err = cli(capsys, *command, "--store", url)
        assert code == 0 and err == "", command
        assert_clean(out)
        assert not any(line.lstrip().startswith("FAKE") for line in out.splitlines()), out
        assert "\\x1b" in out or command[0] == "history", command
    code, out, _ = cli(capsys, "show", run.id, "--store", url)
    assert "(x\\x1b]0;PWNED\\x07\\x1b[2J)" in out and "RuntimeError: \\r\\nFAKE: run completed OK" in out


def test_gate_commands_escape_names_and_reasons(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """show (with its gate reason), fork, approve and cancel print the run's name escaped."""
    run = paused_run(url)
    code, out, _ = cli(capsys, "show", run.id, "--store", url)
    assert code == 0 and "\\x1b[1A\\rFAKE: approved" in out
    assert_clean(out)
    for command in (["fork", run.id, "--set", "x=5"], ["approve", run.id, "--by", "ana"], ["cancel", run.id]):
        code, out, err = cli(capsys, *command, "--store", url)
        assert code == 0 and err == "", (command, err)
        assert "(x\\x1b]0;PWNED\\x07\\x1b[2J)" in out, command
        assert_clean(out)


def test_json_output_keeps_the_text_and_escapes_c1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json output parses back to the exact name, with no raw control character in it."""
    url = f"sqlite:///{tmp_path}/c1.db"
    name = "c1\x9b31m\x7f ünï"
    flow = dnb.Workflow(name, store=url)

    @flow.node()
    def only(state: dict[str, Any]) -> dict[str, Any]:
        return {"done": True}

    flow.run({})
    try:
        code, out, _ = cli(capsys, "runs", "--json", "--store", url)
    finally:
        disconnect(url)
    assert code == 0 and json.loads(out)[0]["name"] == name and "ünï" in out
    assert_clean(out)


def test_errors_are_one_line_with_their_exit_code(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A library error is one 'error: ...' line with its exit code; a hostile error text is escaped."""
    run = failed_run(url)
    code, out, err = cli(capsys, "show", "no-such-run", "--store", url)
    assert code == EXIT_NOT_FOUND and out == "" and err.startswith("error: No run with id")
    assert_one_line(err)
    code, _, err = cli(capsys, "cancel", run.id, "--store", url)
    assert code == EXIT_STATE and err.startswith("error: ")
    assert_one_line(err)
    code, _, err = cli(capsys, "show", "bad\r\nFAKE: ok\x1b[2J", "--store", url)
    assert code == EXIT_NOT_FOUND and "bad\\r\\nFAKE: ok\\x1b[2J" in err
    assert_one_line(err)


@pytest.mark.parametrize(
    ("command", "error_type", "exit_code"),
    [
        (["show", "no-such-run"], "RunNotFound", EXIT_NOT_FOUND),
        (["fork", "{run}", "--set", "x='text'"], "InvalidInput", EXIT_FAILED),
        (["cancel", "{run}"], "NotCancellable", EXIT_STATE),
    ],
)
def test_json_errors_are_json(
    url: str, capsys: pytest.CaptureFixture[str], command: list[str], error_type: str, exit_code: int
) -> None:
    """With --json an error is one JSON object on stderr: its type, message and exit code."""
    run = failed_run(url)
    args = [part.format(run=run.id) for part in command]
    code, out, err = cli(capsys, *args, "--json", "--store", url)
    assert code == exit_code and out == ""
    assert_one_line(err)
    error = json.loads(err)["error"]
    assert error["type"] == error_type and error["exit_code"] == exit_code and error["message"]


@pytest.mark.parametrize("last", ["-5", "0", "many", "1.5"])
@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_show_last_must_be_a_positive_whole_number(
    url: str, capsys: pytest.CaptureFixture[str], last: str, as_json: list[str]
) -> None:
    """show --last below 1 or not a whole number is a usage error (exit 2), --json or not."""
    run = failed_run(url)
    with pytest.raises(SystemExit) as done:
        main(["show", run.id, "--last", last, *as_json, "--store", url])
    assert done.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--last" in err and "whole number of 1 or more" in err


def test_show_last_one_lists_one_checkpoint(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """show --last 1 lists the latest checkpoint only."""
    run = failed_run(url)
    code, out, _ = cli(capsys, "show", run.id, "--last", "1", "--json", "--store", url)
    assert code == 0 and len(json.loads(out)["last_checkpoints"]) == 1


def test_argparse_errors_are_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    """A control character typed on the command line comes back escaped in argparse's error."""
    with pytest.raises(SystemExit) as done:
        main(["runs", "\x1b[2Jextra"])
    assert done.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "\\x1b[2Jextra" in err
    assert_clean(err)


def test_fork_refuses_a_changed_type(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """fork --set x='text' on an int x is refused in one line naming x, int and str; no fork is made."""
    run = paused_run(url)
    before = fork_count(url)
    code, out, err = cli(capsys, "fork", run.id, "--set", "x='text'", "--store", url)
    assert code == EXIT_FAILED and out == ""
    assert_one_line(err)
    assert " x " in err and "int" in err and "str" in err
    assert fork_count(url) == before


def test_fork_accepts_numbers_for_numbers(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An int may become a float (ints and floats mix); a new name or None is accepted too."""
    run = paused_run(url)
    code, out, err = cli(
        capsys, "fork", run.id, "--set", "x=2.5", "--set", "label=None", "--set", "fresh=[1]", "--json", "--store", url
    )
    assert code == 0 and err == ""
    state = dnb.get_run(json.loads(out)["run_id"], store=url).state
    assert state["x"] == 2.5 and state["label"] is None and state["fresh"] == [1]


def test_fork_checks_types_at_the_chosen_checkpoint(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--at picks the checkpoint whose values are checked; a bool is not an int."""
    run = paused_run(url)
    first = str(dnb.history(run.id, store=url)["checkpoint_id"].iloc[0])
    code, _, err = cli(capsys, "fork", run.id, "--at", first, "--set", "x=True", "--store", url)
    assert code == EXIT_FAILED and " x " in err and "int" in err and "bool" in err
    assert_one_line(err)
    code, out, _ = cli(capsys, "fork", run.id, "--at", first, "--set", "x=7", "--json", "--store", url)
    assert code == 0 and json.loads(out)["parent_checkpoint_id"] == first


def test_fork_refuses_reserved_names_and_unknown_runs(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--set __name is refused (exit 1); an unknown run stays RunNotFound (exit 4), --at or not."""
    run = paused_run(url)
    code, _, err = cli(capsys, "fork", run.id, "--set", "__loop_x=1", "--store", url)
    assert code == EXIT_FAILED and "reserved" in err
    assert_one_line(err)
    for at in ([], ["--at", "no-such-checkpoint"]):
        code, _, err = cli(capsys, "fork", "no-such-run", *at, "--set", "x=1", "--store", url)
        assert code == EXIT_NOT_FOUND
        assert_one_line(err)


def test_unexpected_exception_is_one_line(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error from outside durable_nb is one 'error: Type: message' line, exit 1, no traceback."""

    def disk_full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left\non device\x1b[2J")

    monkeypatch.setattr(dnb, "runs", disk_full)
    code, out, err = cli(capsys, "runs", "--store", url)
    assert code == EXIT_FAILED and out == ""
    assert err == "error: OSError: [Errno 28] No space left\\non device\\x1b[2J\n"
    code, _, err = cli(capsys, "runs", "--json", "--store", url)
    assert code == EXIT_FAILED
    assert_one_line(err)
    assert json.loads(err) == {
        "error": {"type": "OSError", "message": "[Errno 28] No space left\non device\x1b[2J", "exit_code": 1}
    }


def test_interrupt_is_one_line(url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C ends the command with exit 130 and one line."""

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(dnb, "runs", interrupted)
    code, out, err = cli(capsys, "runs", "--store", url)
    assert code == EXIT_INTERRUPTED and out == "" and err == "error: interrupted\n"
    code, _, err = cli(capsys, "runs", "--json", "--store", url)
    assert code == EXIT_INTERRUPTED and json.loads(err)["error"]["type"] == "KeyboardInterrupt"


def test_fork_refuses_values_it_cannot_load(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value whose class cannot be imported here cannot be type-checked: refused in one line, unless set to None."""
    # Not in the working directory (the tests run there, and "" may be on sys.path).
    folder = tmp_path / "lib"
    folder.mkdir()
    (folder / "gone_module.py").write_text("class Settings:\n    pass\n")
    monkeypatch.syspath_prepend(str(folder))
    from gone_module import Settings  # type: ignore[import-not-found]

    flow = dnb.Workflow("unloadable", store=url)

    @flow.node()
    def prepare(state: dict[str, Any]) -> dict[str, Any]:
        return {"settings": Settings(), "x": 1}

    run = flow.run({})
    # As in another process: the module that defines the stored class is not importable.
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(folder)])
    monkeypatch.delitem(sys.modules, "gone_module")
    code, _, err = cli(capsys, "fork", run.id, "--set", "settings={'a': 1}", "--store", url)
    assert code == EXIT_FAILED and "settings" in err and "ModuleNotFoundError" in err
    assert_one_line(err)
    code, _, err = cli(capsys, "fork", run.id, "--set", "settings=None", "--set", "x=2", "--store", url)
    assert code == 0, err
