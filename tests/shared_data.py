"""The shared data set (Debian package descriptions) that sits beside the repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def read_texts(name: str, limit: int | None = None) -> list[str]:
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"{path} not found (the shared data set sits beside the repository)")
    with path.open(encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    return texts[:limit]


def read_rerank(limit: int | None = None) -> list[dict]:
    path = SHARED_DATA / "rerank.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not found (the shared data set sits beside the repository)")
    with path.open(encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return records[:limit]
