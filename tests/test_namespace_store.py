"""How a notebook's variables sit in the store: shared objects kept together, content-addressed values.

Variables that share objects are one group blob; a group's array buffers are raw blobs of their
own, written once however often the group is stored again, kept alive by the group (schema
version 2: ``blobs.parts``), checked against their address before use, and pruned with it.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import db_path, execute_sql, is_postgres
from IPython.core.interactiveshell import InteractiveShell

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.store import ddl
from durable_nb.store.sqlite_schema import SCHEMA_VERSION


class Shell:
    """An IPython shell with the extension loaded, attached to a run of the test's store."""

    def __init__(self, store_url: str) -> None:
        self.shell = InteractiveShell()
        self.shell.run_line_magic("load_ext", "durable_nb")
        self.ok(f"%durable run groups --store {store_url}")

    def ok(self, source: str) -> Any:
        result = self.shell.run_cell(source)
        assert result.success, result.error_in_exec or result.error_before_exec
        return result.result

    @property
    def ns(self) -> dict[str, Any]:
        return self.shell.user_ns

    def release(self) -> None:
        from durable_nb.notebook.session import session_for

        session = session_for(self.shell)
        if session.cell_run is not None:
            run_sync(session.cell_run.release())


@pytest.fixture
def shell(store_url: str) -> Iterator[Shell]:
    yield Shell(store_url)


def raw_blobs(store_url: str) -> list[tuple[str, int]]:
    rows = execute_sql(store_url, "SELECT hash, size FROM blobs WHERE codec IN ('raw', 'raw-zstd')")
    return [(h, int(size)) for h, size in rows]


def head_manifest(store_url: str) -> dict[str, str]:
    run_id = dnb.runs("groups", store=store_url)["run_id"].iloc[0]
    return run_sync(dnb.connect(store_url).state_at(run_id)).manifest


def test_shared_variables_are_one_group_and_buffers_are_written_once(shell: Shell, store_url: str) -> None:
    """An alias joins its target's group (stored again, with the same identity); the array's
    bytes are not written again for it."""
    cells = [
        "%%durable make\nimport numpy as np\nbig = np.random.default_rng(0).random(200_000)\nother = [1, 2]",
        "%%durable alias\nsame = big",
        "%%durable grow\nbig[0] = -1.0",
    ]
    shell.ok(cells[0])
    assert [size for _, size in raw_blobs(store_url)] == [1_600_000]
    shell.ok(cells[1])
    manifest = head_manifest(store_url)
    assert manifest["same"] == manifest["big"] != manifest["other"]
    assert len(raw_blobs(store_url)) == 1  # the alias cost a new group, not a new copy of the bytes
    shell.ok(cells[2])
    assert len(raw_blobs(store_url)) == 2  # changed bytes: a new buffer
    run_id = dnb.runs("groups", store=store_url)["run_id"].iloc[0]
    written = dnb.history(run_id, store=store_url).set_index("step")["bytes_written"]
    assert 1_600_000 < written["after:make"] < 1_610_000
    assert written["after:alias"] < 10_000  # a group of two names, counted once; no bytes of the array
    assert 1_600_000 < written["after:grow"] < 1_610_000
    shell.release()
    restored = Shell(store_url)
    for cell in cells:
        restored.ok(cell)
    assert restored.ns["same"] is restored.ns["big"] and restored.ns["big"][0] == -1.0


def test_cells_restore_with_their_own_code_hash(store_url: str) -> None:
    """The restored session holds exactly what the cells committed, in cell order."""
    first = Shell(store_url)
    cells = ["%%durable one\nimport numpy as np\nx = np.ones(3)", "%%durable two\ny = x[1:]\nx *= 2"]
    for cell in cells:
        first.ok(cell)
    first.release()
    second = Shell(store_url)
    for cell in cells:
        second.ok(cell)
    assert second.ns["x"].tolist() == [2.0, 2.0, 2.0] and second.ns["y"].tolist() == [2.0, 2.0]
    assert np.shares_memory(second.ns["x"], second.ns["y"])


def test_an_edited_array_buffer_is_refused(shell: Shell, store_url: str) -> None:
    """Array bytes changed in the store do not match their address: the restore
    fails with TamperedValueError and the variable is not loaded."""
    shell.ok("%%durable make\nimport numpy as np\nvalues = np.arange(1000, dtype=np.int64)")
    [(address, _)] = raw_blobs(store_url)
    forged = np.arange(1000, dtype=np.int64)
    forged[0] = 666
    execute_sql(store_url, "UPDATE blobs SET data = ? WHERE hash = ?", (forged.tobytes(), address))
    shell.release()
    restorer = InteractiveShell()
    restorer.run_line_magic("load_ext", "durable_nb")
    restorer.run_cell(f"%durable run groups --store {store_url}")
    result = restorer.run_cell("%%durable make\nimport numpy as np\nvalues = np.arange(1000, dtype=np.int64)")
    assert isinstance(result.error_in_exec, dnb.TamperedValueError)
    assert "values" not in restorer.user_ns


def test_an_edited_group_never_runs_code(shell: Shell, store_url: str, tmp_path: Path) -> None:
    """A group blob replaced by a pickle that runs code fails its signature check."""
    shell.ok("%%durable make\nitems = [1, 2, 3]\ntwin = items")
    address = head_manifest(store_url)["items"]
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Evil(str(marker)))
    [(data,)] = execute_sql(store_url, "SELECT data FROM blobs WHERE hash = ?", (address,))
    header_end = 8 + int.from_bytes(bytes(data)[4:8], "big")
    execute_sql(store_url, "UPDATE blobs SET data = ? WHERE hash = ?", (bytes(data)[:header_end] + payload, address))
    shell.release()
    restorer = InteractiveShell()
    restorer.run_line_magic("load_ext", "durable_nb")
    restorer.run_cell(f"%durable run groups --store {store_url}")
    result = restorer.run_cell("%%durable make\nitems = [1, 2, 3]\ntwin = items")
    assert isinstance(result.error_in_exec, dnb.TamperedValueError)
    assert not marker.exists()


class _Evil:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.path,))


def test_prune_keeps_the_buffers_of_kept_groups_and_drops_the_rest(shell: Shell, store_url: str) -> None:
    """Prune: a buffer lives while a kept checkpoint's group refers to it, and goes with it."""
    shell.ok("%%durable make\nimport numpy as np\narr = np.zeros(50_000)")
    first_buffer = raw_blobs(store_url)
    shell.ok("%%durable change\narr += 1")
    shell.ok("%%durable other\nnote = 'x'")
    shell.ok("%durable end")
    report = dnb.prune(older_than=datetime.now(UTC) + timedelta(hours=1), store=store_url)
    assert report.blobs >= 1
    kept = raw_blobs(store_url)
    assert len(kept) == 1 and kept != first_buffer  # the first version of arr had no checkpoint left
    run_id = dnb.runs("groups", store=store_url)["run_id"].iloc[0]
    state = dnb.get_run(run_id, store=store_url).state
    assert state["arr"].tolist()[:3] == [1.0, 1.0, 1.0] and state["note"] == "x"


def test_a_large_buffer_is_a_value_file(shell: Shell, store_url: str) -> None:
    """An array of 4 MB or more is written once as a file beside a SQLite store."""
    if is_postgres(store_url):
        pytest.skip("value files are a SQLite store's")
    shell.ok("%%durable make\nimport numpy as np\nhuge = np.random.default_rng(0).random(700_000)")
    [(address, size)] = raw_blobs(store_url)
    file = Path(f"{db_path(store_url)}-blobs") / address
    assert file.stat().st_size == size == 5_600_000
    shell.ok("%%durable alias\nhuge_again = huge")
    assert len(raw_blobs(store_url)) == 1


def test_a_schema_1_store_is_migrated_with_its_data(store_url: str) -> None:
    """A store written by the previous schema is migrated forward on open, its data kept."""
    types = ("DOUBLE PRECISION", "BYTEA", "BIGINT") if is_postgres(store_url) else ("REAL", "BLOB", "INTEGER")
    real, blob, bigint = types
    if is_postgres(store_url):
        import psycopg

        from durable_nb.store.postgres import _split

        conninfo, options = _split(store_url)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{options["schema"]}"')
    statements = [s for s in ddl.schema_v1(real, blob, bigint).split(";") if s.strip()]
    statements.insert(0, f"CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at {real} NOT NULL)")
    statements.append("INSERT INTO schema_version VALUES (1, 0)")
    for statement in statements:
        execute_sql(store_url, statement)
    execute_sql(
        store_url,
        "INSERT INTO blobs (hash, codec, size, created_at, data) VALUES (?, ?, ?, ?, ?)",
        ("j-old", "json", 2, 0.0, b"42"),
    )
    flow = dnb.Workflow("after-migration", store=store_url)

    @flow.node()
    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {"done": True}

    assert flow.run({}).status == "completed"
    versions = sorted(v for (v,) in execute_sql(store_url, "SELECT version FROM schema_version"))
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert execute_sql(store_url, "SELECT data, parts FROM blobs WHERE hash = 'j-old'") == [(b"42", None)]


def test_restored_values_are_not_stored_again_unless_changed(store_url: str) -> None:
    """After a restart, a cell that uses restored values without changing them stores only
    what it made; one that changes a restored value in place stores that value."""
    cells = [
        "%%durable make\nimport numpy as np\ndef scale(v):\n    return v * factor\nfactor = 3\n"
        "table = {'a': np.arange(5)}\nnames = ['x', 'y']",
    ]
    first = Shell(store_url)
    first.ok(cells[0])
    first.release()
    second = Shell(store_url)
    second.ok(cells[0])
    second.ok("%%durable use\nresult = scale(table['a']).sum() + len(names)")
    second.ok("%%durable change\ntable['b'] = names")
    run_id = dnb.runs("groups", store=store_url)["run_id"].iloc[0]
    changed = dnb.history(run_id, store=store_url).set_index("step")["changed"]
    assert sorted(changed["after:use"]) == ["result"]
    assert sorted(changed["after:change"]) == ["names", "table"]  # now sharing a list: one group


def test_figures_are_stored_again_only_when_they_change(store_url: str) -> None:
    """A figure kept in a variable is not stored again by cells that leave it alone, even
    while pyplot keeps it open (a file backend); a change made through pyplot's current figure
    is committed with the variable that holds it."""
    cells = [
        "%%durable draw\nimport matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots()\nax.plot([1, 2, 3])",
        "%%durable other\nn = 1",
        "%%durable title\nplt.title('set through pyplot')",
    ]
    shell = Shell(store_url)
    for cell in cells:
        shell.ok(cell)
    run_id = dnb.runs("groups", store=store_url)["run_id"].iloc[0]
    changed = dnb.history(run_id, store=store_url).set_index("step")["changed"]
    assert sorted(changed["after:other"]) == ["n"]
    assert sorted(changed["after:title"]) == ["ax", "fig"]
    shell.release()
    restored = Shell(store_url)
    for cell in cells:
        restored.ok(cell)
    assert restored.ns["ax"].get_title() == "set through pyplot" and restored.ns["ax"].figure is restored.ns["fig"]


def test_arrays_that_compress_are_stored_compressed(shell: Shell, store_url: str) -> None:
    """An array whose bytes compress well (small integers, as in scikit-learn's digits) is
    stored compressed; random floats are stored as they are; both restore exactly."""
    cells = [
        "%%durable make\nimport numpy as np\nrng = np.random.default_rng(0)\n"
        "counts = rng.integers(0, 17, size=(2000, 64)).astype(np.float64)\nnoise = rng.random(100_000)"
    ]
    shell.ok(cells[0])
    stored = execute_sql(store_url, "SELECT codec, size FROM blobs WHERE codec IN ('raw', 'raw-zstd')")
    [compressed] = [size for kind, size in stored if kind == "raw-zstd"]
    assert compressed < 0.3 * 2000 * 64 * 8
    assert ("raw", 800_000) in stored
    expected = (shell.ns["counts"].copy(), shell.ns["noise"].copy())
    shell.release()
    restored = Shell(store_url)
    restored.ok(cells[0])
    assert np.array_equal(restored.ns["counts"], expected[0]) and np.array_equal(restored.ns["noise"], expected[1])
    restored.ns["counts"][0, 0] = -1.0  # a restored array is writable, as it was


def test_an_edited_compressed_buffer_is_refused(shell: Shell, store_url: str) -> None:
    """Compressed array bytes replaced in the store fail the check of their address."""
    import zstandard

    shell.ok("%%durable make\nimport numpy as np\nzeros = np.zeros(100_000)")
    [(address, codec_name)] = execute_sql(store_url, "SELECT hash, codec FROM blobs WHERE codec IN ('raw', 'raw-zstd')")
    assert codec_name == "raw-zstd"
    forged = zstandard.ZstdCompressor().compress(np.ones(100_000).tobytes())
    execute_sql(store_url, "UPDATE blobs SET data = ? WHERE hash = ?", (forged, address))
    shell.release()
    restorer = InteractiveShell()
    restorer.run_line_magic("load_ext", "durable_nb")
    restorer.run_cell(f"%durable run groups --store {store_url}")
    result = restorer.run_cell("%%durable make\nimport numpy as np\nzeros = np.zeros(100_000)")
    assert isinstance(result.error_in_exec, dnb.TamperedValueError)
