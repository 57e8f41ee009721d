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


@pytest.fixture(scope="session")
def default_model_path() -> str:
    from wde.engine_args import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def default_llm():
    from wde import LLM

    return LLM()
