from __future__ import annotations

import os
from pathlib import Path

import pytest

# Triton's interpreter runs the fused kernels (wde/layers/fused) on the CPU for their tests; it must be on
# before anything imports triton (whose own language functions are decorated at import). Not where a GPU is:
# there the kernels run compiled.
if not Path("/dev/nvidiactl").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")

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
