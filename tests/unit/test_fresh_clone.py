"""A user's clone has no ``../shared`` beside it: every test that reads the shared data set skips there with
one line naming the missing folder, and nothing else in the suite reads it (tests/shared_data.py refuses a
read from a test without the ``shared_data`` marker). This runs the marked tests with the data moved away."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shared_data import SHARED_DATA_ENV, read_texts

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"mark\.shared_data\b")


def marked_paths() -> list[str]:
    """The test files that apply the marker, and the folder of a conftest that does: collecting only these
    (not the whole suite, ~40 s of imports) finds every marked test; an unmarked test that reads the data
    fails the guard below instead."""
    paths = []
    for path in sorted((REPO_ROOT / "tests").rglob("*.py")):
        if path != Path(__file__).resolve() and MARKER.search(path.read_text()):
            paths.append(path.parent if path.name == "conftest.py" else path)
    return [str(path.relative_to(REPO_ROOT)) for path in paths]


def test_shared_data_tests_skip_naming_the_file_without_it(tmp_path: Path) -> None:
    absent = tmp_path / "no-shared-data"
    env = {**os.environ, SHARED_DATA_ENV: str(absent)}
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
    command += ["-m", "shared_data and not gpu", *marked_paths()]
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    summary = output.strip().splitlines()[-1]
    match = re.match(r"^(\d+) skipped, (\d+) deselected", summary)
    assert match and int(match.group(1)) >= 10, summary  # nothing passed, failed or errored: all skipped
    skips = [line for line in output.splitlines() if line.startswith("SKIPPED")]
    assert skips and all(
        re.search(rf"{re.escape(str(absent))}(/\w+\.jsonl)? not found \(the shared data set", line)
        for line in skips
    ), "\n".join(skips)


def test_an_unmarked_test_may_not_read_the_shared_data() -> None:
    """The guard that keeps the check above complete: this test has no ``shared_data`` marker."""
    with pytest.raises(
        RuntimeError, match=r"reads the shared data set \(docs.jsonl\) without the `shared_data`"
    ):
        read_texts("docs.jsonl", 1)
