from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def default_model_path() -> str:
    from wde.engine_args import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def default_llm():
    from wde import LLM

    return LLM()
