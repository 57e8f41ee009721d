"""``read_model_info``: what a model directory says about itself (no weights are read: a one-tensor
checkpoint stands in for them; the bundled all-MiniLM-L6-v2 lends its tokenizer), and how
``EngineArgs.create_engine_config`` combines it with the user's flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from wde.engine_args import EngineArgs, default_model_path
from wde.model_folder.llm_reranker import QWEN3_RERANKER
from wde.model_folder.model_info import read_model_info

MINILM = default_model_path()
BERT = "wde.models.bert:BertModel"


def _model_dir(root: Path, architecture: str, **config: Any) -> str:
    """A folder with config.json and a placeholder checkpoint (read_model_info never opens it)."""
    path = root / architecture
    path.mkdir()
    hf_config = {"architectures": [architecture], "hidden_size": 32, "vocab_size": 30522, **config}
    (path / "config.json").write_text(json.dumps(hf_config), encoding="utf-8")
    save_file({"placeholder": torch.zeros(1)}, str(path / "model.safetensors"))
    return str(path)


def test_the_bundled_sentence_transformer() -> None:
    info = read_model_info(MINILM, MINILM)
    assert (info.architecture, info.model_entry.class_path, info.task) == ("BertModel", BERT, "embed")
    assert (info.pooling.method, info.pooling.normalize) == ("mean", True)  # its Pooling + Normalize
    assert info.default_max_model_len == 256  # sentence_bert_config.json max_seq_length
    assert (info.num_reserved_positions, info.max_positions) == (0, 512)
    assert info.outputs == ("dense",) and info.sparse is None and info.multi_vector is None
    assert info.pair_template is None and info.default_instruction is None
    assert info.hf_config["model_type"] == "bert"


def test_xlm_roberta_reserves_positions(tmp_path: Path) -> None:
    model_path = _model_dir(tmp_path, "XLMRobertaModel", max_position_embeddings=66, pad_token_id=1)
    info = read_model_info(model_path, MINILM)
    assert (info.num_reserved_positions, info.max_positions, info.default_max_model_len) == (2, 64, 64)
    assert (info.pooling.method, info.pooling.normalize) == ("cls", True)  # no modules: CLS + normalize
    config = EngineArgs(model=model_path, tokenizer=MINILM).create_engine_config().model_config
    assert (config.num_reserved_positions, config.max_positions, config.max_model_len) == (2, 64, 64)
    with pytest.raises(ValueError, match=r"max_model_len \(65\) is larger .* \(64 usable positions"):
        EngineArgs(model=model_path, tokenizer=MINILM, max_model_len=65).create_engine_config()


def test_a_task_the_class_does_not_serve_is_named() -> None:
    with pytest.raises(ValueError, match="task 'score' is not supported by BertModel; it supports: embed"):
        read_model_info(MINILM, MINILM, task="score")


def test_an_llm_reranker_gets_its_score_tokens_for_the_score_task_only(tmp_path: Path) -> None:
    model_path = _model_dir(tmp_path, "Qwen3ForCausalLM", id2label={"0": "a", "1": "b"})
    embed = read_model_info(model_path, MINILM)
    assert embed.task == "embed" and "score_token_ids" not in embed.hf_config
    assert embed.pair_template is None and (embed.pooling.method, embed.pooling.normalize) == ("last", True)
    score = read_model_info(model_path, MINILM, task="score")
    vocabulary = json.loads((Path(MINILM) / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    assert score.hf_config["score_token_ids"] == [vocabulary["no"], vocabulary["yes"]]
    assert score.hf_config["num_labels"] == 1 and "id2label" not in score.hf_config
    assert score.pair_template == QWEN3_RERANKER.pair_template
    assert score.default_instruction == QWEN3_RERANKER.default_instruction
    assert score.default_score_activation() == "sigmoid"  # one label


def test_an_unknown_saved_activation_needs_the_flag_only_when_it_is_read(tmp_path: Path) -> None:
    model_path = _model_dir(
        tmp_path,
        "BertForSequenceClassification",
        num_labels=1,
        sbert_ce_default_activation_function="torch.nn.modules.activation.GELU",
    )
    info = read_model_info(model_path, MINILM)
    with pytest.raises(ValueError, match="pass --score-activation one of"):
        info.default_score_activation()
    args = EngineArgs(model=model_path, tokenizer=MINILM, score_activation="tanh")
    assert args.create_engine_config().model_config.score_activation == "tanh"
