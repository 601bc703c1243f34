"""What a cell's code mentions and what effects outside its variables it may have.

Which variables a cell changed is decided by their content after it runs (see the namespace
tracker); the syntax tree only says where to look (the names the cell mentions) and which
statements act on the process rather than on variables: configuration magics, assignments
to a module's attributes, and calls that look like they set something up.
"""

# Annotations evaluated, not strings: the named tuples below keep them as their fields' types.

import ast
import hashlib
import re
from typing import Any

from .._tuples import Typed

__all__ = ["SETTING_MAGICS", "CellCode", "Definition", "SetupCall", "analyze"]

# Line magics that configure the kernel, and are cheap and safe to run again on restore.
SETTING_MAGICS = frozenset(
    "matplotlib config load_ext reload_ext autoreload aimport precision xmode pylab colors doctest_mode "
    "alias unalias autocall automagic".split()
)
# Calls whose names say they set process-wide state (seeds, configuration, registration): a name
# that starts with one of the prefixes, holds one of the parts, or is one of the names. Tests of
# text, not a regular expression, whose compiling was a tenth of a kernel's attach.
_SETTING_PREFIXES = ("set_", "enable", "disable", "config", "register", "init", "setup")
_SETTING_PARTS = ("seed", "configure")
_SETTING_NAMES = frozenset(
    "use basicConfig setLevel switch_backend ion ioff interactive login load_dotenv putenv setrecursionlimit "
    "set_printoptions install".split()
)


def _sets_up(name: str) -> bool:
    """Whether a called name (an identifier) says the call sets process-wide state."""
    return (
        name in _SETTING_NAMES
        or (name.startswith(_SETTING_PREFIXES) and name != "set_")
        or any(part in name for part in _SETTING_PARTS)
    )


class SetupCall(Typed):
    """A top-level call that looks like set-up: the dotted name called, its text, and whether it
    sits in a branch or loop (so may not have run)."""

    path: str
    text: str
    conditional: bool


class Definition(Typed):
    """A top-level ``def`` or ``class`` statement of a cell, decorators included, as the cell ran it."""

    source: str
    line: int


class CellCode:
    """A parsed cell: its statements, the expression it ends with, and what it mentions."""

    statements: list[ast.stmt]
    last_expr: ast.Expression | None
    source_hash: str
    names: frozenset[str]
    magics: list[tuple[str, str]]
    module_attributes: list[str]
    setting_calls: list[SetupCall]
    # Functions and classes whose value is what their definition made (not rebound after it).
    definitions: dict[str, Definition]

    __slots__ = (
        "definitions",
        "last_expr",
        "magics",
        "module_attributes",
        "names",
        "setting_calls",
        "source_hash",
        "statements",
    )

    def __init__(
        self,
        statements: list[ast.stmt],
        last_expr: ast.Expression | None,
        source_hash: str,
        names: frozenset[str] = frozenset(),
        magics: list[tuple[str, str]] | None = None,
        module_attributes: list[str] | None = None,
        setting_calls: list[SetupCall] | None = None,
        definitions: dict[str, Definition] | None = None,
    ) -> None:
        self.statements = statements
        self.last_expr = last_expr
        self.source_hash = source_hash
        self.names = names
        self.magics = [] if magics is None else magics
        self.module_attributes = [] if module_attributes is None else module_attributes
        self.setting_calls = [] if setting_calls is None else setting_calls
        self.definitions = {} if definitions is None else definitions


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _line_magic(node: ast.stmt) -> tuple[str, str] | None:
    # IPython turns ``%name line`` into ``get_ipython().run_line_magic('name', 'line')``.
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return None
    call = node.value
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "run_line_magic"):
        return None
    if not (isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Name)):
        return None
    if func.value.func.id != "get_ipython" or len(call.args) < 2:
        return None
    name, line = call.args[0], call.args[1]
    if isinstance(name, ast.Constant) and isinstance(line, ast.Constant):
        return str(name.value), str(line.value)
    return None


# What _dump does with a value of each type met so far: for a node class, its name and fields (each
# with whether a None there is left out: its class default is None); _LIST or _REPR otherwise.
_KINDS: dict[type, Any] = {}
_LIST = "list"
_REPR = "repr"


def _kind(cls: type) -> Any:
    if issubclass(cls, ast.AST):
        fields = tuple((name, getattr(cls, name, ...) is None) for name in cls._fields)
        kind: Any = (cls.__name__, fields)
    else:
        kind = _LIST if issubclass(cls, list) else _REPR
    _KINDS[cls] = kind
    return kind


def _dump(node: Any) -> str:
    """``ast.dump(node)`` (fields named, no attributes, on one line), the same text with less work:
    it names the code, at every cell, and ast.dump cost more than parsing it."""
    kind = _KINDS.get(type(node)) or _kind(type(node))
    if kind is _REPR:
        return repr(node)
    if kind is _LIST:
        return "[" + ", ".join(map(_dump, node)) + "]"
    name, fields = kind
    parts = []
    for field, optional in fields:
        try:
            value = getattr(node, field)
        except AttributeError:
            continue
        if value is None and optional:
            continue
        parts.append(field + "=" + _dump(value))
    return name + "(" + ", ".join(parts) + ")"


# How ast.dump shows a Name node (without attributes): its id is an identifier, shown by repr.
# Compiled at the first cell (by re's own cache), not when a kernel attaches.
_NAME_IN_DUMP = r"Name\(id='([^']*)', ctx="


_BRANCHES = ast.If | ast.For | ast.AsyncFor | ast.While | ast.Match


def _top_level(statements: list[ast.stmt], conditional: bool = False) -> list[tuple[ast.stmt, bool]]:
    """Statements that run when the cell runs, into if/for/while/with/try bodies, not into defs;
    each with whether it sits in a branch, a loop or an exception handler (a ``try`` body counts
    as running: it does, up to a statement that raises)."""
    found = []
    for statement in statements:
        found.append((statement, conditional))
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        branch = conditional or isinstance(statement, _BRANCHES)
        found.extend(_top_level(getattr(statement, "body", []) or [], branch))
        found.extend(_top_level(getattr(statement, "orelse", []) or [], True))
        found.extend(_top_level(getattr(statement, "finalbody", []) or [], conditional))
        for handler in getattr(statement, "handlers", []) or []:
            found.extend(_top_level(handler.body, True))
        for case in getattr(statement, "cases", []) or []:
            found.extend(_top_level(case.body, True))
    return found


_DEFINITIONS = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
_SCOPES = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda


def _bound(node: ast.AST) -> set[str]:
    """Names a statement binds or deletes in the cell's namespace (not inside functions it defines)."""
    if isinstance(node, _DEFINITIONS):
        return {node.name}
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    found = set()
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
        found.add(node.id)
    for attribute in ("name", "rest"):  # except … as name, match patterns
        value = getattr(node, attribute, None)
        if isinstance(value, str) and not isinstance(node, ast.alias):
            found.add(value)
    for child in ast.iter_child_nodes(node):
        if isinstance(child, _SCOPES):
            found |= {child.name} if isinstance(child, _DEFINITIONS) else set()
        elif isinstance(child, ast.comprehension):
            found |= _bound(child.iter) | {n for c in child.ifs for n in _bound(c)}  # its target is its own
        else:
            found |= _bound(child)
    return found


# Line breaks of str.splitlines that the parser does not count (ASCII ones: others fail isascii).
_OTHER_LINE_BREAKS = ("\x0b", "\x0c", "\x1c", "\x1d", "\x1e")


def _holds_any(lines: list[str], statement: ast.stmt, names: dict[str, Definition]) -> bool:
    """Whether the statement's text holds one of ``names`` (walking its tree costs a hundred times more)."""
    text = "".join(lines[statement.lineno - 1 : statement.end_lineno])
    return any(name in text for name in names)


def _definitions(tree: ast.Module, source: str) -> dict[str, Definition]:
    """The cell's top-level definitions whose names nothing after them in the cell binds again."""
    lines = source.splitlines(keepends=True)
    # Lines as the parser counts them, with only identifiers of ASCII: a statement can then bind a
    # name only if its text holds it.
    plain = source.isascii() and not any(separator in source for separator in _OTHER_LINE_BREAKS)
    found: dict[str, Definition] = {}
    for statement in tree.body:
        # What a statement binds is only looked for once a definition above it may lose its name.
        if found and (not plain or _holds_any(lines, statement, found)):
            for name in _bound(statement):
                found.pop(name, None)
        if isinstance(statement, _DEFINITIONS) and statement.end_lineno is not None:
            # A decorated statement starts at its first decorator, not at ``def``.
            first = min([statement.lineno, *(d.lineno for d in statement.decorator_list)])
            found[statement.name] = Definition("".join(lines[first - 1 : statement.end_lineno]), first)
    return found


# The latest cells analyzed, by their text: a cell run again (restored, replayed, a Run All) is
# not parsed, walked and dumped again. A CellCode is read, never changed, by those it is given to.
_ANALYZED: dict[str, CellCode] = {}
_ANALYZED_KEPT = 64


def analyze(source: str) -> CellCode:
    """Parse Python source (IPython syntax already transformed) into a CellCode."""
    found = _ANALYZED.get(source)
    if found is None:
        found = _analyze(source)
        if len(_ANALYZED) >= _ANALYZED_KEPT:
            del _ANALYZED[next(iter(_ANALYZED))]  # the oldest
        _ANALYZED[source] = found
    return found


def _analyze(source: str) -> CellCode:
    tree = ast.parse(source)
    # Comments and formatting do not change the tree: its dump names the code.
    dump = _dump(tree)
    source_hash = hashlib.sha256(dump.encode()).hexdigest()
    # Every Name node's id, read from the dump in C (a walk of the tree in Python cost as much as
    # the dump). A string constant holding such text adds a name that is only checked for nothing.
    names = frozenset(re.findall(_NAME_IN_DUMP, dump))
    magics: list[tuple[str, str]] = []
    module_attributes: list[str] = []
    setting_calls: list[SetupCall] = []
    for statement, conditional in _top_level(tree.body):
        magic = _line_magic(statement)
        if magic is not None:
            if magic[0] in SETTING_MAGICS:
                magics.append(magic)
            continue
        if isinstance(statement, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            module_attributes.extend(d for t in targets if isinstance(t, ast.Attribute) and (d := _dotted(t)))
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            called = _dotted(statement.value.func)
            if called and _sets_up(called.rsplit(".", 1)[-1]):
                text = ast.get_source_segment(source, statement) or called
                setting_calls.append(SetupCall(called, text, conditional))
    statements = list(tree.body)
    last_expr = None
    if statements and isinstance(statements[-1], ast.Expr):
        last = statements.pop()
        last_expr = ast.Expression(body=last.value)  # type: ignore[attr-defined]
        ast.copy_location(last_expr, last)
    return CellCode(
        statements=statements,
        last_expr=last_expr,
        source_hash=source_hash,
        names=names,
        magics=magics,
        module_attributes=module_attributes,
        setting_calls=setting_calls,
        definitions=_definitions(tree, source),
    )
