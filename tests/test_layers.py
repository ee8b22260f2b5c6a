"""a2sql's modules import one way: each layer only from the layers below it.

The layers, lowest first, as docs/development.md draws them. ``backends`` is in
two: its seam (``base``, ``registry``, ``column_types``: what the SQL is written
against) sits below the SQL; the engines (``sqlite``, ``postgresql``), which
override whole operations with their own statements, sit above the plans. An
import inside ``if TYPE_CHECKING:`` names a type for an annotation and is not
counted; an import inside a function is (it runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

import a2sql

PACKAGE = Path(a2sql.__file__).parent

# Module name prefixes, lowest layer first; the longest prefix decides.
LAYERS: list[tuple[str, ...]] = [
    ("a2sql.core",),
    ("a2sql.backends.base", "a2sql.backends.registry", "a2sql.backends.column_types"),
    ("a2sql.sql",),
    ("a2sql.plans",),
    ("a2sql.backends",),
    ("a2sql.execution",),
    ("a2sql.notify",),
    ("a2sql.migrate", "a2sql._migrations"),
    ("a2sql.api",),
    ("a2sql.metrics",),
    ("a2sql.worker",),
    ("a2sql.ui",),
    # The frameworks' adapters (each behind an extra): over the API; nothing below
    # imports them, so the core never loads a framework.
    ("a2sql.integrations",),
    ("a2sql.cli", "a2sql.testing"),
]


def _layer(module: str) -> int:
    if module == "a2sql":  # the package's __init__: the public names, over everything
        return len(LAYERS) - 1
    best, found = -1, -1
    for number, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), number
    assert found >= 0, f"{module} is in no layer: add it to LAYERS"
    return found


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST, package: str, modules: set[str]) -> list[tuple[int, str]]:
    """(line, module) of every a2sql import that runs, outside ``if TYPE_CHECKING``."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            # ``from a2sql.sql import executor`` imports the module a2sql.sql.executor;
            # ``from a2sql.sql.executor import Transaction``, that module.
            submodules = [f"{name}.{alias.name}" for alias in node.names]
            named = [module for module in submodules if module in modules]
            found.extend((node.lineno, module) for module in named or [name])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return [(line, name) for line, name in found if name.split(".")[0] == "a2sql"]


def test_imports_point_down_the_layers() -> None:
    wrong: list[str] = []
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        here = _layer(module)
        for line, imported in _runtime_imports(ast.parse(path.read_text()), package, modules):
            if _layer(imported) > here:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {imported}")
    assert not wrong, "imports up the layers:\n" + "\n".join(wrong)


def test_every_module_is_in_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        _layer(_module_name(path))
