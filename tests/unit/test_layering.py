"""The import rules of docs/architecture.md, read from the source (ast): the loop (wde/engine) never imports
the doors (wde/entrypoints), wde never imports server, the lower layers never import the engine or the
doors, the model-folder readers (wde/model_folder) import no family, layer, worker, loop or door, no
import circle among module-level imports of wde/ and server/, and every module of wde/engine/ and
wde/entrypoints/ has a test file of its own (tests/**/test_<module>.py)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("wde", "server")


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, module_level_only: bool) -> Iterator[str]:
    """Names of the wde/server modules ``path`` imports (``from a.b import c`` yields a.b.c when that is a
    module, else a.b); TYPE_CHECKING blocks are skipped, and with ``module_level_only`` function bodies
    too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])

    def visit(nodes: list[ast.stmt]) -> Iterator[str]:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node):
                yield from visit(node.orelse)
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and module_level_only:
                continue
            if isinstance(node, ast.Import):
                yield from (alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    yield full if full in MODULES else base
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    yield from visit([child])

    for name in visit(tree.body):
        if name.split(".")[0] in PACKAGES:
            yield name


def _arrows(module_level_only: bool) -> dict[str, set[str]]:
    return {
        name: {target for target in _imports(path, module_level_only) if target in MODULES and target != name}
        for name, path in MODULES.items()
    }


FORBIDDEN = [
    ("wde.engine", "wde.entrypoints", "the loop never imports the doors"),
    ("wde", "server", "the library never imports the server"),
    ("wde.worker", "wde.engine", "the worker is below the loop"),
    ("wde.worker", "wde.entrypoints", "the worker is below the doors"),
    ("wde.models", "wde.engine", "models are below the loop"),
    ("wde.models", "wde.entrypoints", "models are below the doors"),
    ("wde.layers", "wde.engine", "layers are below the loop"),
    ("wde.layers", "wde.entrypoints", "layers are below the doors"),
    ("wde.layers", "wde.worker", "layers are below the worker"),
    # the model-folder readers are torch-free: a family is named by a string the loader imports
    ("wde.model_folder", "wde.models", "the readers name a family's class (registry.py), never import it"),
    ("wde.model_folder", "wde.layers", "the readers are below the layers (torch-free)"),
    ("wde.model_folder", "wde.worker", "the readers are below the worker"),
    ("wde.model_folder", "wde.engine", "the readers are below the loop"),
    ("wde.model_folder", "wde.entrypoints", "the readers are below the doors"),
]


@pytest.mark.parametrize(("source", "target", "why"), FORBIDDEN)
def test_no_forbidden_import_arrow(source: str, target: str, why: str) -> None:
    found = [
        f"{name} -> {imported}"
        for name, imported_set in _arrows(module_level_only=False).items()
        if name == source or name.startswith(source + ".")
        for imported in imported_set
        if imported == target or imported.startswith(target + ".")
    ]
    assert not found, f"{why}: {found}"


def test_no_import_circle() -> None:
    arrows = _arrows(module_level_only=True)
    # a package imports its own submodules by design (``wde/__init__`` re-exports): not a circle
    for name in arrows:
        arrows[name] = {t for t in arrows[name] if not t.startswith(name + ".")}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(arrows.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (circle := visit(target)) is not None:
                return circle
        path.pop()
        state[node] = 2
        return None

    for name in sorted(arrows):
        if name not in state:
            circle = visit(name)
            assert circle is None, f"import circle: {' -> '.join(circle)}"


@pytest.mark.parametrize("package", ["engine", "entrypoints"])
def test_every_loop_and_door_module_has_its_own_test(package: str) -> None:
    test_files = {path.name for path in (ROOT / "tests").rglob("test_*.py")}
    modules = [p.stem for p in (ROOT / "wde" / package).glob("*.py") if p.stem != "__init__"]
    missing = [m for m in modules if f"test_{m}.py" not in test_files]
    assert not missing, f"wde/{package}/ modules without tests/**/test_<module>.py: {missing}"
