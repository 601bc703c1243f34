"""``%durable run NAME --all``: every later code cell runs as a ``%%durable`` cell, without that line.

How: an input transformer (IPython's documented hook, run before IPython turns a ``%%`` line into a
cell magic call) puts ``%%durable NODE`` above each cell in this mode, and IPython then runs the
cell through the ``%%durable`` magic exactly as if the person had typed that line: restore, fork on
edit, gates, retries all take the one path. NODE is made here (a tag, ``cell-<id>`` or position and
digest, see ``cell_names``), never from the cell's text beyond a digest of it.

The cell id: ipykernel hands the front end's ``cellId`` to ``run_cell`` as ``cell_id``, and IPython
gives it to ``pre_run_cell`` callbacks as ``ExecutionInfo.cell_id``; but IPython transforms a cell
before that event, so the transformer reads it from the execute request being handled
(``shell.get_parent()``, the message ipykernel takes it from). A shell without one (a plain
IPython shell) names cells by position (tags are found by cell id).
"""

from __future__ import annotations

import re
from typing import Any

from .cell_names import PLAIN_TAG, id_name, is_node_name, positional_name, tag_name
from .notebook_tags import NotebookTags, notebook_path

__all__ = ["AllCells", "CellSyntaxError", "runs_durably", "show_syntax_error"]

# A cell that controls durable_nb itself (attaching, ending, deciding) is not work to commit.
# Compiled when --all first meets a cell (by ``re``'s own cache), not when a kernel attaches.
_CONTROL = r"^\s*(%durable\b|%(re)?load_ext\s+durable_nb\b)"


def runs_durably(text: str) -> bool:
    """True for a cell that ``--all`` makes durable: code, not empty, no other cell magic, not ``%durable …``."""
    lines = [line.strip() for line in text.splitlines()]
    code = [line for line in lines if line and not line.startswith("#")]
    if not code:
        return False  # empty, or comments only
    if next(line for line in lines if line).startswith("%%"):
        return False  # an explicit %%durable NODE, or another cell magic: the cell runs as written
    return re.search(_CONTROL, text, re.MULTILINE) is None


class CellSyntaxError(SyntaxError):
    """A syntax error in a cell that ``--all`` made durable, shown as IPython shows a plain cell's."""

    kind: type[SyntaxError] = SyntaxError


def show_syntax_error(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> None:
    """Show a cell's syntax error without frames, as IPython does for a plain cell (a custom exception handler)."""
    kind = getattr(value, "kind", SyntaxError)
    stb = shell.SyntaxTB.structured_traceback(kind, value, [])
    shell._showtraceback(kind, value, stb)  # IPython's own display step, which ipykernel sends as 'error'


class AllCells:
    """The ``--all`` mode of one shell: on or off, and how its cells are named.

    It is itself the input transformer (``has_side_effects`` keeps IPython's completeness check
    from calling it while a person types).
    """

    has_side_effects = True

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.enabled = False
        self.cells: dict[str, str] = {}  # node name -> the cell id it was made from (for front ends)
        self._depth = 0  # executions under way: transforms inside a cell (%%time's body, ours) are not cells
        self._sent_tags: dict[str, list[str]] = {}
        self._file_tags = NotebookTags()
        self._positions: dict[str, int] = {}
        self._tag_owners: dict[str, str | None] = {}
        self._made: str | None = None
        self._plain_code: str | None = None

    # -- on and off ------------------------------------------------------------------------

    def start(self) -> None:
        """Make every later code cell durable (the cell saying so is running: it is not one of them)."""
        if self.enabled:
            return
        self.enabled = True
        self._depth = 1
        self.shell.input_transformers_cleanup.append(self)
        events = self.shell.events
        events.register("pre_execute", self._pre_execute)
        events.register("post_execute", self._post_execute)
        events.register("post_run_cell", self._post_run_cell)

    def stop(self) -> None:
        """Run later cells as written again."""
        if not self.enabled:
            return
        self.enabled = False
        if self in self.shell.input_transformers_cleanup:
            self.shell.input_transformers_cleanup.remove(self)
        events = self.shell.events
        for name, callback in (
            ("pre_execute", self._pre_execute),
            ("post_execute", self._post_execute),
            ("post_run_cell", self._post_run_cell),
        ):
            if callback in events.callbacks[name]:
                events.unregister(name, callback)

    def note_cell_info(self, cell_id: str, tags: list[str]) -> None:
        """Remember a cell's tags, sent by the front end before the cell runs."""
        self._sent_tags[str(cell_id)] = [str(tag) for tag in tags]

    # -- the transformer ------------------------------------------------------------------

    def __call__(self, lines: list[str]) -> list[str]:
        """Put ``%%durable NODE`` above a cell that runs durably in this mode."""
        if not self.enabled or self._depth or not lines:
            return lines
        request = self._request()
        if request is None:
            return lines
        cell_id = (request.get("metadata") or {}).get("cellId")
        text = "".join(lines)
        if not runs_durably(text):
            return lines
        tags = self._tags(cell_id)
        if PLAIN_TAG in tags:
            return lines
        node = self._name(cell_id, tags, text)
        if not is_node_name(node):  # made here from checked parts; checked again, as text that becomes code
            return lines
        self._made = node
        return [f"%%durable {node}\n", *lines]

    def _request(self) -> dict[str, Any] | None:
        """The execute request being handled ({} in a shell without a kernel), None when it is not a cell's run."""
        get_parent = getattr(self.shell, "get_parent", None)
        parent = get_parent() if callable(get_parent) else None
        if not isinstance(parent, dict) or not parent:
            return {}
        if (parent.get("header") or {}).get("msg_type") != "execute_request":
            return None  # code run for a comm or a widget, not a notebook cell
        content = parent.get("content") or {}
        if content.get("silent") or not content.get("store_history", True):
            return None  # a front end's own silent request (an inspector, a widget)
        return parent

    def _tags(self, cell_id: object) -> list[str]:
        if not isinstance(cell_id, str):
            return []
        if cell_id in self._sent_tags:
            return self._sent_tags[cell_id]
        return self._file_tags.tags(notebook_path(self.shell.user_ns), cell_id)

    def _name(self, cell_id: object, tags: list[str], text: str) -> str:
        known = cell_id if isinstance(cell_id, str) else None
        named = tag_name(tags)
        # A tag another cell already goes by names only that cell (as run-notebook does).
        if named is not None and self._tag_owners.setdefault(named, known) == known:
            node = named
        else:
            node = id_name(known) or ""
        if not node:
            # In a kernel, a cell's position is the order in which cells were first seen.
            index = self._positions.setdefault(text, len(self._positions) + 1)
            node = positional_name(index, text.rstrip("\n"))
        if known is not None:
            self.cells[node] = known
        return node

    # -- while cells run --------------------------------------------------------------------

    def transformed(self, node: str, code: str) -> None:
        """Note the cell's code as IPython transformed it for the magic: what ``In[n]`` shows of it."""
        if node == self._made:
            self._plain_code = code

    def plain_error(self, node: str, error: BaseException) -> BaseException | None:
        """Make the error of a cell this mode made durable read as a plain cell's; return one to raise instead.

        A traceback starts at the cell's code, not at the ``run_cell_magic`` call the cell was turned
        into followed by durable_nb's own frames (``_render_traceback_`` is how IPython lets an
        exception render itself); a syntax error is shown alone, as IPython shows a plain cell's.
        """
        if node != self._made:
            return None  # an explicit %%durable cell: shown as it always was
        if isinstance(error, SyntaxError) and self._plain_code is not None:
            # Named as IPython names the cell, so that the error reads 'Cell In[n], line …'.
            filename = self.shell.compile.cache(self._plain_code, max(self.shell.execution_count - 1, 0))
            where = (filename, error.lineno, error.offset, error.text, error.end_lineno, error.end_offset)
            shown = CellSyntaxError(error.msg, where)
            shown.kind = type(error)  # an IndentationError reads as one
            return shown
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_globals is not self.shell.user_ns:
            tb = tb.tb_next
        if tb is None:
            return None
        shell = self.shell

        def render() -> list[str]:
            return list(shell.InteractiveTB.structured_traceback(type(error), error, tb, tb_offset=0))

        try:
            error._render_traceback_ = render  # type: ignore[attr-defined]
        except AttributeError:
            pass  # an exception without attributes of its own: IPython's usual traceback
        return None

    def _pre_execute(self) -> None:
        self._depth += 1

    def _post_execute(self) -> None:
        self._depth = max(0, self._depth - 1)

    def _post_run_cell(self, result: Any) -> None:
        """Keep ``In[n]`` as a plain cell has it: the cell's own code, not the magic call made of it."""
        node, self._made = self._made, None
        plain, self._plain_code = self._plain_code, None
        info = getattr(result, "info", None)
        count = getattr(result, "execution_count", None)
        history = getattr(self.shell, "history_manager", None)
        if node is None or plain is None or info is None or not count or history is None or not info.store_history:
            return
        parsed = history.input_hist_parsed
        made = f"get_ipython().run_cell_magic('durable', {node!r}, "
        if len(parsed) <= count or not parsed[count].startswith(made):
            return
        plain = plain.rstrip("\n")
        parsed[count] = plain
        with history.db_input_cache_lock:
            cache = history.db_input_cache
            if cache and cache[-1][0] == count:
                cache[-1] = (count, plain, cache[-1][2])
