"""Benchmark inputs: texts from a .jsonl (``text`` / ``query`` / ``documents`` fields) or .txt file."""

from __future__ import annotations

import json
from pathlib import Path


def load_texts(path: str | Path, limit: int | None = None) -> list[str]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"benchmark data {path} not found")
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
