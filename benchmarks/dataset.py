"""Benchmark inputs: texts from a .jsonl (``text`` / ``query`` / ``documents`` fields) or .txt file."""

from __future__ import annotations

import json
import os
from pathlib import Path

# The shared data set (Debian package descriptions: docs.jsonl, queries.jsonl, rerank.jsonl) sits beside
# the repository, in ../shared/data, or where $WDE_SHARED_DATA points; a user's clone and an installed wde
# have neither and need --data.
SHARED_DATA_ENV = "WDE_SHARED_DATA"
SHARED_DATA = Path(os.environ.get(SHARED_DATA_ENV) or Path(__file__).resolve().parents[2] / "shared" / "data")


class BenchmarkDataError(FileNotFoundError):
    """The benchmark's data file is missing; the message says what it is and how to pass another."""


def shared_data_path(name: str) -> str:
    """``../shared/data/<name>`` beside the repository, whatever the current directory."""
    return str(SHARED_DATA / name)


def require_data(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise BenchmarkDataError(
            f"benchmark data {path} not found: the default is the shared data set (Debian package "
            "descriptions) that sits beside the repository in ../shared/data; pass --data FILE with a "
            '.jsonl of {"text": ...} lines (or a .txt of one text per line)'
        )
    return path


def load_texts(path: str | Path, limit: int | None = None) -> list[str]:
    path = require_data(path)
    texts: list[str] = []
    with path.open(encoding="utf-8") as f:
        if path.suffix != ".jsonl":
            texts = [line.rstrip("\n") for line in f if line.strip()]
        else:
            for line in f:
                record = json.loads(line)
                if "text" in record:
                    texts.append(record["text"])
                elif "documents" in record:  # rerank.jsonl: the query, then its candidates
                    texts.append(record["query"])
                    texts.extend(record["documents"])
                else:
                    raise ValueError(f"{path}: a line has neither 'text' nor 'documents': {sorted(record)}")
    return texts[:limit] if limit else texts
