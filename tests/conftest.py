from __future__ import annotations

import pytest

from tests import shared_data


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Which test is being set up, before its fixtures: reading the shared data checks its marker."""
    shared_data.current_item = item


@pytest.fixture(scope="session")
def default_model_path() -> str:
    from wde.engine_args import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def default_llm():
    from wde import LLM

    return LLM()
