from __future__ import annotations

import pytest

from tests import shared_data


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Which test is being set up, before its fixtures: reading the shared data checks its marker; a marked
    test skips at once when the set is absent."""
    shared_data.current_item = item
    if item.get_closest_marker(shared_data.MARKER) is not None:
        shared_data.skip_without_the_set()


@pytest.fixture(scope="session")
def default_model_path() -> str:
    from wde.engine_args import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def default_llm():
    from wde import LLM

    return LLM()
