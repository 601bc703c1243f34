"""What a cell's code defines and may change, found by reading its syntax tree (N2, N5)."""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field

__all__ = ["CellCode", "analyze"]


@dataclass(slots=True)
class CellCode:
    """A parsed cell: its body, the expression it ends with, and the names it touches."""

    body: ast.Module
    last_expr: ast.Expression | None
    source_hash: str
    assigned: set[str] = field(default_factory=set)
    mutated: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)

    @property
    def candidates(self) -> set[str]:
        """Names whose values are new or may have changed: the ones worth serializing."""
        return (self.assigned | self.mutated) - self.deleted


# Builtins that never change their arguments, so passing a value to them is only a use.
_READ_ONLY_BUILTINS = frozenset(
    "abs all any ascii bin bool bytes callable chr complex dict dir divmod enumerate float format "
    "frozenset getattr hasattr hash hex id int isinstance issubclass len list max min oct ord pow "
    "print range repr reversed round set sorted str sum tuple type zip".split()
)


def _root(node: ast.AST) -> str | None:
    # The variable at the bottom of ``a.b[0].c``: changing any part of it changes ``a``.
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Starred):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


class _Names(ast.NodeVisitor):
    """Collect top-level bindings; function and class bodies have scopes of their own."""

    def __init__(self) -> None:
        self.assigned: set[str] = set()
        self.mutated: set[str] = set()
        self.deleted: set[str] = set()

    def _target(self, target: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.assigned.add(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            for item in target.elts:
                self._target(item)
        elif isinstance(target, ast.Starred):
            self._target(target.value)
        else:
            root = _root(target)
            if root is not None:
                self.mutated.add(root)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target)
        self.visit(node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target)
        root = _root(node.target)
        if root is not None:
            self.mutated.add(root)
        self.visit(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._target(node.target)
            self.visit(node.value)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self._target(node.target)
        self.visit(node.value)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self._target(node.target)
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            if item.optional_vars is not None:
                self._target(item.optional_vars)
        self.generic_visit(node)

    visit_AsyncWith = visit_With

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self.assigned.add(alias.asname or alias.name.split(".")[0])

    visit_ImportFrom = visit_Import

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.assigned.add(node.name)
        for decorator in node.decorator_list:
            self.visit(decorator)

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        return None  # its parameters are its own

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.assigned.add(node.name)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                self.deleted.add(target.id)
                self.assigned.discard(target.id)
            else:
                root = _root(target)
                if root is not None:
                    self.mutated.add(root)

    def visit_Global(self, node: ast.Global) -> None:
        self.assigned.update(node.names)

    def visit_Call(self, node: ast.Call) -> None:
        # A method call or a call that receives a value may change it in place.
        if isinstance(node.func, ast.Name) and node.func.id in _READ_ONLY_BUILTINS:
            self.generic_visit(node)
            return
        if isinstance(node.func, ast.Attribute):
            root = _root(node.func.value)
            if root is not None:
                self.mutated.add(root)
        for argument in [*node.args, *(k.value for k in node.keywords)]:
            root = _root(argument)
            if root is not None:
                self.mutated.add(root)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            self.assigned.add(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self.assigned.add(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self.assigned.add(node.rest)
        self.generic_visit(node)


def analyze(source: str) -> CellCode:
    """Parse Python source (IPython syntax already transformed) into a CellCode."""
    tree = ast.parse(source)
    # Comments and formatting do not change the tree: its dump names the code (N5).
    source_hash = hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()
    names = _Names()
    for statement in tree.body:
        names.visit(statement)
    last_expr = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body.pop()
        last_expr = ast.Expression(body=last.value)  # type: ignore[attr-defined]
        ast.copy_location(last_expr, last)
        names.visit(last)
    return CellCode(
        body=tree,
        last_expr=last_expr,
        source_hash=source_hash,
        assigned=names.assigned,
        mutated=names.mutated - names.assigned,
        deleted=names.deleted,
    )
