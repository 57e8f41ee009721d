"""``docs/architecture.md`` against the code: every path it names exists, and its import maps (one fenced
block per package, a line per room: ``room → the rooms it imports``) are the import graph the code has,
arrow for arrow, computed here from the source as ``test_layering.py`` computes it. A room is a top-level
module or subpackage of ``wde/`` or ``server/``; an arrow means some module of the room imports some module
of the other (function-level imports included, TYPE_CHECKING blocks left out). When the code changes, the
failure message prints the block to paste."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from tests.unit.test_layering import MODULES, ROOT, _arrows

DOC = ROOT / "docs" / "architecture.md"
ARROW = "→"
MAX_WIDTH = 110  # the page's code blocks, as its prose
# a path into the repository: the top folder, then name characters; "<...>" placeholders end it
PATH = re.compile(r"(?<![\w/.<-])((?:wde|server|benchmarks|tests|docker|docs)/[\w./-]*[\w/])")
MAP_HEADER = re.compile(r"^Imports of (\w+)/, room by room", re.MULTILINE)


def room_of(module: str) -> str:
    """``wde.engine.scheduler`` -> ``wde.engine``; ``wde.config`` -> itself; ``wde`` -> itself."""
    return ".".join(module.split(".")[:2])


def room_name(room: str) -> str:
    """How the page writes a room: a package as its folder (``wde/engine/``), a module as its file
    (``wde/config.py``), a package's own ``__init__`` as ``wde/__init__.py``."""
    path = MODULES[room]
    relative = path.relative_to(ROOT).as_posix()
    if path.name == "__init__.py" and "." in room:
        return relative.removesuffix("__init__.py")
    return relative


def room_graph(package: str) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in _arrows(module_level_only=False).items():
        if room_of(module).split(".")[0] != package:
            continue
        for target in targets:
            if target.split(".")[0] == package and room_of(target) != room_of(module):
                graph[room_of(module)].add(room_of(target))
    return graph


def expected_block(package: str) -> str:
    """A line per room, ``room → the rooms it imports``, wrapped under the arrow at ``MAX_WIDTH``."""
    graph = room_graph(package)
    rooms = sorted({room_of(module) for module in MODULES if module.split(".")[0] == package})
    width = max(len(room_name(room)) for room in rooms) + 1
    lines = []
    for room in rooms:
        line = f"{room_name(room):<{width}}{ARROW}"
        for target in sorted(room_name(t) for t in graph[room]):
            if len(line) + 1 + len(target) > MAX_WIDTH:
                lines.append(line)
                line = " " * (width + 1)
            line += f" {target}"
        lines.append(line)
    return "\n".join(lines)


def drawn_block(package: str) -> str:
    """The fenced block after the page's "Imports of <package>/, room by room" line."""
    text = DOC.read_text(encoding="utf-8")
    for match in MAP_HEADER.finditer(text):
        if match.group(1) == package:
            start = text.index("```", match.end())
            body_start = text.index("\n", start) + 1
            return text[body_start : text.index("```", body_start)].rstrip("\n")
    raise AssertionError(f"docs/architecture.md has no line 'Imports of {package}/, room by room'")


def exists(path: str) -> bool:
    """A file or folder; a module written without ``.py`` (``wde/models/registry``), or with an attribute
    after it (``tests/server/virtual_clock.VirtualTimeLoop``)."""
    path = path.rstrip("/.")
    module, _, _ = path.partition(".")
    return (ROOT / path).exists() or (ROOT / f"{path}.py").exists() or (ROOT / f"{module}.py").exists()


def test_every_path_the_page_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = sorted({path for path in PATH.findall(text) if not exists(path)})
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


@pytest.mark.parametrize("package", ["wde", "server"])
def test_the_import_map_is_the_code(package: str) -> None:
    expected = expected_block(package)
    assert drawn_block(package) == expected, (
        f"docs/architecture.md's import map of {package}/ differs from the code; the code's:\n{expected}"
    )
