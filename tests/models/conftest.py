"""Session fixtures: tiny random checkpoints (see tests/tiny_models.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tiny_models import SEED, copy_as_pytorch_bin, save_tiny_bert, save_tiny_xlmr


@pytest.fixture(scope="session")
def bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def bert_gelu_new_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert-gelu-new"), seed=SEED + 1, hidden_act="gelu_new")


@pytest.fixture(scope="session")
def bert_bin_dir(bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_as_pytorch_bin(bert_dir, tmp_path_factory.mktemp("tiny-bert-bin") / "model")


@pytest.fixture(scope="session")
def xlmr_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_xlmr(tmp_path_factory.mktemp("tiny-xlmr"), seed=SEED + 2)
