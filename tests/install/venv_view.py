"""A fresh virtualenv holding wde with exactly one install set (``pip install wde``, ``'wde[server]'``) and
nothing else, built offline from the packages this test environment already has.

``pip install .`` would copy torch and the rest again (a minute and 1.5 GB for every set); instead the
distributions that pip would install for the set (wde's requirements for those extras, pyproject.toml's
``[project.optional-dependencies]`` as installed in wde's metadata, then each requirement's own,
recursively, markers evaluated) are linked into the new venv's site-packages, and wde itself is built as a
wheel from the working tree and installed there by pip. ``pip check`` then holds the venv to every
requirement its distributions declare, so a package missing from the set fails the build, not just the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

WDE = "wde"
# what wde's wheel is built from (pyproject.toml's packages and package data)
SOURCE_ENTRIES = ("pyproject.toml", "README.md", "wde", "server", "benchmarks")


def wde_requirements(repo: Path) -> dict[str, list[str]]:
    """pyproject.toml's requirements: ``""`` the core, then each extra's."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    return {"": project["dependencies"], **project["optional-dependencies"]}


def closure(repo: Path, extras: frozenset[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions that ``pip install 'wde[EXTRAS]'`` needs, by canonical name (wde not
    among them). A requirement on wde itself (``wde[bench,otel]`` in ``dev``) adds its extras."""
    own = wde_requirements(repo)
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    pending: list[tuple[str, frozenset[str]]] = [(WDE, extras)]
    while pending:
        name, wanted = pending.pop()
        key = canonicalize_name(name)
        if (key, wanted) in seen:
            continue
        seen.add((key, wanted))
        if key == WDE:
            lines = [line for extra in ("", *sorted(wanted)) for line in own[extra]]
        else:
            dist = found.setdefault(key, metadata.distribution(name))
            lines = dist.requires or []
        for line in lines:
            requirement = Requirement(line)
            if _applies(requirement, wanted):
                pending.append((requirement.name, frozenset(requirement.extras)))
    return found


def _applies(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in ("", *sorted(extras)))


def build_venv(folder: Path, extras: frozenset[str], repo: Path) -> Path:
    """A venv in ``folder`` with wde and the set of ``extras`` (empty: the core); returns its python."""
    # 1. an empty venv (no pip: the test environment's pip installs into it with --python)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # 2. the set's distributions, linked from this environment
    for dist in closure(repo, extras).values():
        _link_distribution(dist, site)
    # 3. wde itself: a wheel of the working tree, installed by pip as a user's `pip install .` would
    wheel = _build_wheel(repo, folder / "wheel")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--quiet", "--no-deps", "--no-index", str(wheel)], check=True)
    # 4. every declared requirement met by what is there
    check = subprocess.run([*pip, "check"], capture_output=True, text=True)
    if check.returncode != 0:
        raise AssertionError(
            f"pip check in the {sorted(extras) or 'core'} venv:\n{check.stdout}{check.stderr}"
        )
    return python


def _link_distribution(dist: metadata.Distribution, site: Path) -> None:
    """Link the top-level entries of ``dist``'s files (packages, modules, its .dist-info) into ``site``."""
    origin = Path(str(dist.locate_file(""))).resolve()
    tops = {Path(str(file)).parts[0] for file in dist.files or [] if not str(file).startswith("..")}
    for top in sorted(tops):
        source = origin / top
        if source.exists():
            _link(source, site / top)


def _link(source: Path, target: Path) -> None:
    """Symlink ``source`` at ``target``; where two distributions share a folder (a namespace package such
    as ``nvidia/``), the folder becomes real and its entries are linked one by one."""
    if not target.exists() and not target.is_symlink():
        target.symlink_to(source)
        return
    if not (source.is_dir() and target.is_dir()):
        return  # the same file from two distributions: the first one's stays
    if target.is_symlink():
        first = target.resolve()
        target.unlink()
        target.mkdir()
        for entry in first.iterdir():
            (target / entry.name).symlink_to(entry)
    for entry in source.iterdir():
        _link(entry, target / entry.name)


def _build_wheel(repo: Path, out: Path) -> Path:
    """wde's wheel from a copy of the working tree (a build in the checkout would leave build/ there)."""
    source = out / "source"
    for name in SOURCE_ENTRIES:
        entry = repo / name
        if entry.is_dir():
            shutil.copytree(entry, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(entry, source / name)
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([*command, "--wheel-dir", str(out), str(source)], check=True, env=env)
    (wheel,) = out.glob("wde-*.whl")
    return wheel
