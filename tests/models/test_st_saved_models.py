"""Model folders written by the installed sentence-transformers' ``save()`` (module paths of >= 5.7, the
``pooling_mode`` key, max_seq_length kept in the tokenizer config, the CrossEncoder's activation in
config_sentence_transformers.json) load and equal ``SentenceTransformer.encode`` / ``CrossEncoder.predict``;
folders without weights or tokenizer files are refused before anything loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import wde
from tests.models.family_checks import assert_close_to_sentence_transformers
from tests.tiny_models import BERT_TOKENIZER_FILES, SEED, save_tiny_bert, save_tiny_xlmr
from wde.engine_args import EngineArgs
from wde.model_folder.model_files import ModelFilesError
from wde.model_folder.st_metadata import module_kind, read_st_metadata

ATOL = 1e-5
MAX_SEQ_LENGTH = 24  # below the tiny models' 64 positions, so truncation is the saved setting's
TEXTS = [
    "Clam AntiVirus is an anti-virus toolkit for Unix",
    "a",
    "scalpel is a fast file carver " * 8,  # longer than MAX_SEQ_LENGTH: cut as the saved model says
]
PAIRS_QUERY = "mail server virus scanning"


def _save_st(tmp_path: Path, hf_dir: Path, pooling_mode: str, normalize: bool, prompts=None) -> Path:
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(str(hf_dir), max_seq_length=MAX_SEQ_LENGTH)
    modules = [transformer, models.Pooling(transformer.get_embedding_dimension(), pooling_mode)]
    if normalize:
        modules.append(models.Normalize())
    path = tmp_path / f"st-{pooling_mode}-{normalize}"
    SentenceTransformer(modules=modules, prompts=prompts).save(str(path))
    return path


@pytest.fixture(scope="module")
def bert_hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("st-saved-bert"), seed=SEED + 30)


@pytest.mark.parametrize(
    ("pooling_mode", "normalize"), [("mean", True), ("cls", False), ("max", True), ("lasttoken", False)]
)
def test_saved_by_current_sentence_transformers_equals_encode(
    tmp_path: Path, bert_hf_dir: Path, pooling_mode: str, normalize: bool
) -> None:
    from sentence_transformers import SentenceTransformer

    path = _save_st(tmp_path, bert_hf_dir, pooling_mode, normalize)
    modules = json.loads((path / "modules.json").read_text())
    assert not modules[0]["type"].startswith("sentence_transformers.models."), "not the >= 5.7 layout"
    expected = SentenceTransformer(str(path), device="cpu").encode(TEXTS)
    llm = wde.LLM(str(path), device="cpu")
    assert llm.model_config.max_model_len == MAX_SEQ_LENGTH
    got = np.stack([output.embedding for output in llm.encode(TEXTS)])
    assert_close_to_sentence_transformers(got, expected)
    np.testing.assert_allclose(got, expected, atol=ATOL)  # tighter than the families' 1e-4: BERT, same code


def test_saved_prompts_are_applied(tmp_path: Path, bert_hf_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer

    prompts = {"query": "query: ", "document": "passage: "}
    path = _save_st(tmp_path, bert_hf_dir, "mean", True, prompts=prompts)
    reference = SentenceTransformer(str(path), device="cpu")
    llm = wde.LLM(str(path), device="cpu")
    got = np.stack([output.embedding for output in llm.encode(TEXTS, prompt_name="query")])
    np.testing.assert_allclose(got, reference.encode(TEXTS, prompt_name="query"), atol=ATOL)


@pytest.mark.parametrize("activation", ["Identity", "Sigmoid"])
def test_cross_encoder_saved_by_current_sentence_transformers(tmp_path: Path, activation: str) -> None:
    import torch
    from sentence_transformers import CrossEncoder

    hf_dir = save_tiny_xlmr(
        tmp_path / "hf", seed=SEED + 31, architecture="XLMRobertaForSequenceClassification", num_labels=1
    )
    path = tmp_path / "ce"
    activation_fn = getattr(torch.nn, activation)()
    CrossEncoder(str(hf_dir), max_length=MAX_SEQ_LENGTH, activation_fn=activation_fn).save(str(path))
    st_config = json.loads((path / "config_sentence_transformers.json").read_text())
    assert st_config["activation_fn"].endswith(activation)
    expected = CrossEncoder(str(path), device="cpu").predict([(PAIRS_QUERY, text) for text in TEXTS])
    llm = wde.LLM(str(path), device="cpu")
    assert llm.model_config.max_model_len == MAX_SEQ_LENGTH
    scores = llm.score(PAIRS_QUERY, TEXTS)
    np.testing.assert_allclose([score.score for score in scores], expected, atol=1e-4)


def test_module_kinds_old_and_new_paths() -> None:
    for old, new in [
        (
            "sentence_transformers.models.Pooling",
            "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
        ),
        ("sentence_transformers.models.Normalize", "sentence_transformers.base.modules.normalize.Normalize"),
        (
            "sentence_transformers.models.Transformer",
            "sentence_transformers.base.modules.transformer.Transformer",
        ),
    ]:
        assert module_kind(old) == module_kind(new) == old.rsplit(".", 1)[-1]
    assert module_kind("my_package.Pooling") == "my_package.Pooling"


def test_unsupported_module_and_pooling_are_named(tmp_path: Path, bert_hf_dir: Path) -> None:
    path = _save_st(tmp_path, bert_hf_dir, "weightedmean", True)
    with pytest.raises(ValueError, match="weightedmean"):
        read_st_metadata(path)
    modules = json.loads((path / "modules.json").read_text())
    modules[1]["type"] = "my_package.CustomPooling"
    (path / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match=r"my_package\.CustomPooling"):
        read_st_metadata(path)


def test_folder_without_tokenizer_files_is_refused(tmp_path: Path, bert_hf_dir: Path) -> None:
    path = tmp_path / "no-tokenizer"
    shutil.copytree(bert_hf_dir, path, ignore=shutil.ignore_patterns(*BERT_TOKENIZER_FILES))
    with pytest.raises(ModelFilesError, match=r"no tokenizer files \(tokenizer.json"):
        EngineArgs(model=str(path)).create_engine_config()
    # a tokenizer from elsewhere makes it whole
    EngineArgs(model=str(path), tokenizer=str(bert_hf_dir)).create_engine_config()


def test_folder_without_weights_is_refused(tmp_path: Path, bert_hf_dir: Path) -> None:
    path = tmp_path / "no-weights"
    shutil.copytree(bert_hf_dir, path, ignore=shutil.ignore_patterns("*.safetensors"))
    with pytest.raises(ModelFilesError, match="no weights"):
        EngineArgs(model=str(path)).create_engine_config()
