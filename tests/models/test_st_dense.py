"""sentence-transformers ``Dense`` modules after pooling (EmbeddingGemma's 768 -> 3072 -> 768, older models'
Dense + Tanh): a tiny BERT saved by the installed sentence-transformers as Transformer -> Pooling(mean) ->
Dense(tanh) -> Dense(identity, no bias) -> Normalize equals ``SentenceTransformer.encode``; ``dimensions``
is checked against and cuts the Dense output, not the hidden size."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import wde
from tests.models.family_checks import assert_close_to_sentence_transformers
from tests.tiny_models import HIDDEN_SIZE, SEED, WEIGHT_STD, save_tiny_bert
from wde.model_folder.st_metadata import read_st_metadata

MAX_SEQ_LENGTH = 24
DENSE_SIZES = (HIDDEN_SIZE, 48, 24)  # 32 -> 48 (tanh) -> 24 (identity, no bias)
TEXTS = [
    "Clam AntiVirus is an anti-virus toolkit for Unix",
    "a",
    "scalpel is a fast file carver " * 8,  # longer than MAX_SEQ_LENGTH
    "Embeddings map sentences to vectors.",
]


def save_st_with_dense(path: Path, hf_dir: Path, safe_serialization: bool = True) -> Path:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models

    transformer = models.Transformer(str(hf_dir), max_seq_length=MAX_SEQ_LENGTH)
    dense_tanh = models.Dense(DENSE_SIZES[0], DENSE_SIZES[1], activation_function=torch.nn.Tanh())
    dense_identity = models.Dense(
        DENSE_SIZES[1], DENSE_SIZES[2], bias=False, activation_function=torch.nn.Identity()
    )
    generator = torch.Generator().manual_seed(SEED + 41)
    with torch.no_grad():
        for dense in (dense_tanh, dense_identity):
            for param in dense.parameters():
                param.copy_(torch.randn(param.shape, generator=generator) * WEIGHT_STD)
    modules = [
        transformer,
        models.Pooling(transformer.get_embedding_dimension(), "mean"),
        dense_tanh,
        dense_identity,
        models.Normalize(),
    ]
    SentenceTransformer(modules=modules).save(str(path), safe_serialization=safe_serialization)
    return path


@pytest.fixture(scope="module")
def dense_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    hf_dir = save_tiny_bert(tmp_path_factory.mktemp("dense-bert"), seed=SEED + 40)
    return save_st_with_dense(tmp_path_factory.mktemp("st-dense") / "model", hf_dir)


def _assert_close(got: np.ndarray, expected: np.ndarray) -> None:
    assert_close_to_sentence_transformers(got, expected)


def test_metadata_lists_the_dense_stack_in_order(dense_dir: Path) -> None:
    modules = json.loads((dense_dir / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == [
        "Transformer",
        "Pooling",
        "Dense",
        "Dense",
        "Normalize",
    ]
    dense_layers = read_st_metadata(dense_dir).dense_layers
    assert [(d.in_features, d.out_features, d.bias, d.activation) for d in dense_layers] == [
        (32, 48, True, "tanh"),
        (48, 24, False, "identity"),
    ]
    assert [Path(d.path).name for d in dense_layers] == [modules[2]["path"], modules[3]["path"]]


@pytest.mark.parametrize("safe_serialization", [True, False], ids=["safetensors", "pytorch_bin"])
def test_encode_equals_sentence_transformers(
    dense_dir: Path, tmp_path: Path, safe_serialization: bool
) -> None:
    from sentence_transformers import SentenceTransformer

    path = dense_dir
    if not safe_serialization:
        hf_dir = save_tiny_bert(tmp_path / "hf", seed=SEED + 40)
        path = save_st_with_dense(tmp_path / "st", hf_dir, safe_serialization=False)
        assert (Path(read_st_metadata(path).dense_layers[0].path) / "pytorch_model.bin").is_file()
    expected = SentenceTransformer(str(path), device="cpu").encode(TEXTS)
    assert expected.shape == (len(TEXTS), DENSE_SIZES[-1])
    llm = wde.LLM(str(path), device="cpu")
    assert llm.model_config.embedding_size == DENSE_SIZES[-1]
    got = np.stack([output.embedding for output in llm.encode(TEXTS)])
    _assert_close(got, expected)


def test_dimensions_cut_the_dense_output(dense_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer

    dims = 8
    full = SentenceTransformer(str(dense_dir), device="cpu").encode(TEXTS)
    expected = full[:, :dims] / np.linalg.norm(full[:, :dims], axis=1, keepdims=True)  # Matryoshka
    llm = wde.LLM(str(dense_dir), device="cpu")
    got = np.stack([output.embedding for output in llm.encode(TEXTS, dimensions=dims)])
    _assert_close(got, expected)
    # the last Dense module's output size is the limit, not the hidden size (32)
    assert llm.encode(TEXTS[:1], dimensions=DENSE_SIZES[-1])[0].embedding.shape == (DENSE_SIZES[-1],)
    too_many = r"dimensions \(25\) must be between 1 and the model's embedding size \(24\)"
    with pytest.raises(ValueError, match=too_many):
        llm.encode(TEXTS[:1], dimensions=DENSE_SIZES[-1] + 1)


def _rewrite_dense_config(path: Path, **changes: object) -> None:
    config_path = Path(read_st_metadata(path).dense_layers[0].path) / "config.json"
    config = json.loads(config_path.read_text())
    config.update(changes)
    config_path.write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"activation_function": "torch.nn.modules.activation.Softplus"}, "activation_function"),
        ({"use_residual": True}, "use_residual"),
        ({"in_features": 16}, r"in_features \(16\) does not match the model's hidden size \(32\)"),
    ],
)
def test_unsupported_dense_is_refused_before_load(
    dense_dir: Path, tmp_path: Path, changes: dict[str, object], message: str
) -> None:

    from wde.engine_args import EngineArgs

    path = Path(shutil.copytree(dense_dir, tmp_path / "model"))
    _rewrite_dense_config(path, **changes)
    with pytest.raises(ValueError, match=message):
        EngineArgs(model=str(path), device="cpu").create_engine_config()
