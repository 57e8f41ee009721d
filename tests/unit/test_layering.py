"""The import rules of docs/architecture.md, read from the source (ast): the loop (wde/engine) never imports
the doors (wde/entrypoints), wde never imports server, the lower layers never import the engine or the
doors, the model-folder readers (wde/model_folder) import no family, layer, worker, loop or door;
server/'s rooms stand on floors (``SERVER_FLOORS``) and every import between two rooms goes down; the
engine process never imports the app, the routes, the middlewares, FastAPI or Starlette; the routes never
import the launchers; no import circle among module-level imports of wde/, server/ and benchmarks/; and
every module of wde/engine/ and wde/entrypoints/ has a test file of its own (tests/**/test_<module>.py)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("wde", "server", "benchmarks")


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


def _imports(path: Path, module_level_only: bool, ours: bool = True) -> Iterator[str]:
    """Names of the wde/server/benchmarks modules ``path`` imports (``from a.b import c`` yields a.b.c when
    that is a module, else a.b), or with ``ours=False`` those of other packages; TYPE_CHECKING blocks are
    skipped, and with ``module_level_only`` function bodies too."""
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
        if (name.split(".")[0] in PACKAGES) == ours:
            yield name


def _arrows(module_level_only: bool) -> dict[str, set[str]]:
    return {
        name: {target for target in _imports(path, module_level_only) if target in MODULES and target != name}
        for name, path in MODULES.items()
    }


FORBIDDEN = [
    ("wde.engine", "wde.entrypoints", "the loop never imports the doors"),
    ("wde", "server", "the library never imports the server"),
    ("wde", "benchmarks", "the library never imports the benchmarks"),
    ("server.routes", "server.launch", "the routes never import the launchers (the launchers build the app)"),
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


# server/'s rooms (a top-level module or package of server/), top floor first: a room imports only rooms on
# lower floors (and itself); rooms on one floor import none of each other.
SERVER_FLOORS: list[tuple[str, ...]] = [
    ("server.cli",),  # the `wde` command
    ("server.launch", "server.ray_serve"),  # the launchers: the processes of `wde serve` (or Ray Serve's)
    ("server.app",),  # the FastAPI app: its routes, middlewares, handlers and lifespan
    ("server.openapi",),  # /openapi.json, from the routes' bodies and the served models
    ("server.middleware",),  # RequestPipeline (its step 9 hands the Batch API's routes to the forwarder)
    ("server.routes",),  # the route groups
    ("server.direct_routes",),  # the hot JSON routes past Starlette's router
    ("server.json_body_route",),  # JsonBodyRoute: orjson and the body model directly
    ("server.batches",),  # the Batch API: store, runner, the link between API workers
    ("server.app_state",),  # what a request reaches through the app: settings, models, metrics, limits
    ("server.engine_link",),  # the engine client, the engine process, the wire and its messages
    ("server.served_models",),  # the registry, swaps, model memory, the --models file
    ("server.observability",),  # metrics, tracing, access log, process CPU, engine monitor
    ("server.process",),  # what every server process sets up: log, malloc, OpenMP, GC, socket, parent death
    ("server.protocols",),  # the HTTP bodies, one module per API family
    ("server.ignored_fields",),  # unknown body fields, reported
    ("server.error_answers",),  # exceptions -> HTTP answers (FastAPI)
    ("server.doors", "server.errors", "server.responses", "server.settings"),  # plain pieces
]
# (importer room, imported room): why this import runs back up. At most two.
SERVER_UPWARD_ALLOWED: dict[tuple[str, str], str] = {}
ENGINE_PROCESS = "server.engine_link.engine_process"
NOT_IN_THE_ENGINE_PROCESS = ("server.app", "server.routes", "server.middleware", "fastapi", "starlette")


def _room(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_server_rooms_stand_on_floors() -> None:
    floor_of = {room: index for index, floor in enumerate(SERVER_FLOORS) for room in floor}
    rooms = {_room(name) for name in MODULES if name.startswith("server.")}
    assert rooms == set(floor_of), (
        f"rooms of server/ not on a floor: {sorted(rooms - set(floor_of))}; floors naming no room: "
        f"{sorted(set(floor_of) - rooms)}: put each room on SERVER_FLOORS in tests/unit/test_layering.py"
    )
    assert len(SERVER_UPWARD_ALLOWED) <= 2, "at most two imports may run back up: move a module instead"
    upward = sorted(
        f"{name} -> {target}"
        for name, targets in _arrows(module_level_only=False).items()
        if name.startswith("server.")
        for target in targets
        if target.startswith("server.")
        and _room(name) != _room(target)
        and floor_of[_room(target)] <= floor_of[_room(name)]
        and (_room(name), _room(target)) not in SERVER_UPWARD_ALLOWED
    )
    assert not upward, (
        f"imports that do not go down server/'s floors (SERVER_FLOORS): {upward}; move what is imported "
        "below its importer, or pass it in from above"
    )


def test_the_engine_process_never_imports_the_app() -> None:
    """What the engine process imports inside server/ (function bodies included), transitively, is neither
    the app, its routes and middlewares, nor FastAPI or Starlette."""
    arrows = _arrows(module_level_only=False)
    reached, todo = {ENGINE_PROCESS}, [ENGINE_PROCESS]
    while todo:
        for target in arrows[todo.pop()]:
            if target.startswith("server") and target not in reached:
                reached.add(target)
                todo.append(target)
    found = sorted(
        f"{name} -> {imported}"
        for name in reached
        for imported in {*arrows[name], *_imports(MODULES[name], module_level_only=False, ours=False)}
        for banned in NOT_IN_THE_ENGINE_PROCESS
        if imported == banned or imported.startswith(banned + ".")
    )
    assert not found, f"the engine process would import the app or its HTTP stack: {found}"


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
