"""What a cell's code mentions and what effects outside its variables it may have.

Which variables a cell changed is decided by their content after it runs (see the namespace
tracker); the syntax tree only says where to look (the names the cell mentions) and which
statements act on the process rather than on variables: configuration magics, assignments
to a module's attributes, and calls that look like they set something up.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field

__all__ = ["SETTING_MAGICS", "CellCode", "analyze"]

# Line magics that configure the kernel, and are cheap and safe to run again on restore.
SETTING_MAGICS = frozenset(
    "matplotlib config load_ext reload_ext autoreload aimport precision xmode pylab colors doctest_mode "
    "alias unalias autocall automagic".split()
)
# Calls whose names say they set process-wide state (seeds, configuration, registration).
_SETTING_CALL = re.compile(
    r"^(set_\w+|\w*seed\w*|use|enable\w*|disable\w*|config\w*|\w*configure\w*|register\w*|init\w*|"
    r"setup\w*|basicConfig|setLevel|switch_backend|ion|ioff|interactive|login|load_dotenv|putenv|"
    r"setrecursionlimit|set_printoptions|install)$"
)


@dataclass(slots=True)
class CellCode:
    """A parsed cell: its statements, the expression it ends with, and what it mentions."""

    statements: list[ast.stmt]
    last_expr: ast.Expression | None
    source_hash: str
    names: frozenset[str] = frozenset()
    magics: list[tuple[str, str]] = field(default_factory=list)
    module_attributes: list[str] = field(default_factory=list)
    setting_calls: list[tuple[str, str]] = field(default_factory=list)


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


def _top_level(statements: list[ast.stmt]) -> list[ast.stmt]:
    """Statements that run when the cell runs: into if/for/while/with/try bodies, not into defs."""
    found = []
    for statement in statements:
        found.append(statement)
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for block in ("body", "orelse", "finalbody"):
            found.extend(_top_level(getattr(statement, block, []) or []))
        for handler in getattr(statement, "handlers", []) or []:
            found.extend(_top_level(handler.body))
    return found


def analyze(source: str) -> CellCode:
    """Parse Python source (IPython syntax already transformed) into a CellCode."""
    tree = ast.parse(source)
    # Comments and formatting do not change the tree: its dump names the code.
    source_hash = hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()
    names = frozenset(node.id for node in ast.walk(tree) if isinstance(node, ast.Name))
    magics: list[tuple[str, str]] = []
    module_attributes: list[str] = []
    setting_calls: list[tuple[str, str]] = []
    for statement in _top_level(tree.body):
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
            if called and _SETTING_CALL.match(called.rsplit(".", 1)[-1]):
                setting_calls.append((called, ast.get_source_segment(source, statement) or called))
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
    )
