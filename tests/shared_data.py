"""The shared data set (Debian package descriptions: docs.jsonl, queries.jsonl, rerank.jsonl).

It sits beside the repository in ``../shared/data`` on our machines, or wherever ``$WDE_SHARED_DATA`` points;
a user's clone has neither. A test that reads it carries the ``shared_data`` marker and skips with one line
naming the missing folder (before its fixtures) or file; reading it from an unmarked test is an error, so
that ``pytest -m shared_data`` with the data moved away (tests/unit/test_fresh_clone.py) checks every such
test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.dataset import SHARED_DATA, SHARED_DATA_ENV  # where the benchmarks read it too

MARKER = "shared_data"
# The test being set up or run, set by tests/conftest.py before its fixtures (session fixtures included).
current_item: pytest.Item | None = None


def skip_without_the_set() -> None:
    """Skip a marked test before its fixtures build anything (models, servers) when the whole set is absent,
    as in a user's clone: one line naming the folder looked for."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} not found (the shared data set; set {SHARED_DATA_ENV} to its folder)")


def shared_data_file(name: str) -> Path:
    """The path of ``name`` in the shared data set; skips the current test, naming the path, when absent."""
    if current_item is not None and current_item.get_closest_marker(MARKER) is None:
        raise RuntimeError(
            f"{current_item.nodeid} reads the shared data set ({name}) without the `{MARKER}` marker: add "
            f"@pytest.mark.{MARKER} (or pytestmark), so that the fresh-clone check sees it skip without it"
        )
    path = SHARED_DATA / name
    if not path.is_file():
        pytest.skip(f"{path} not found (the shared data set; set {SHARED_DATA_ENV} to its folder)")
    return path


def read_records(name: str, limit: int | None = None) -> list[dict[str, Any]]:
    with shared_data_file(name).open(encoding="utf-8") as f:
        lines = f if limit is None else (line for _, line in zip(range(limit), f, strict=False))
        return [json.loads(line) for line in lines]


def read_texts(name: str, limit: int | None = None) -> list[str]:
    return [record["text"] for record in read_records(name, limit)]


def read_rerank(limit: int | None = None) -> list[dict[str, Any]]:
    return read_records("rerank.jsonl", limit)
