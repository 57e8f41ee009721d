"""``read_model_info``: what a local model directory says about itself, for the task it is served with.

It reads ``config.json`` (the architecture -> its ``ModelEntry`` in ``registry.py``: no family is imported,
nor torch), checks the weight and tokenizer files, reads the sentence-transformers modules (pooling, Dense
layers, prompts, max_seq_length, a CrossEncoder's activation), the sparse / multi-vector heads
(``served_outputs.py``), an LLM reranker's score tokens and the default lengths.
``EngineArgs.create_engine_config`` then only combines a ``ModelInfo`` with the user's flags and the platform.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wde.config import (
    DenseConfig,
    MultiVectorConfig,
    PoolingConfig,
    SparseConfig,
    TaskAdapters,
    max_positions,
    num_labels,
)
from wde.model_folder.model_files import check_model_files
from wde.model_folder.registry import ModelEntry, resolve_architecture
from wde.model_folder.served_outputs import read_served_outputs
from wde.model_folder.st_metadata import read_st_metadata

# sentence-transformers stores a CrossEncoder's activation as a torch class path in config.json.
_ST_ACTIVATIONS = {"Sigmoid": "sigmoid", "Softmax": "softmax", "Tanh": "tanh", "Identity": "identity"}


@dataclass
class ModelInfo:
    """A model directory's own defaults; every field is what wde serves unless a flag says otherwise."""

    model_path: str
    tokenizer_path: str
    architecture: str  # the config.json architecture wde serves it as
    model_entry: ModelEntry  # the class it is served with (by name) and its facts
    task: str  # "embed" or "score": the asked one, or the entry's first
    # config.json; an LLM reranker's score task adds its score token ids and has one label
    hf_config: dict[str, Any]
    num_reserved_positions: int  # rows of the position table no token can use
    default_max_model_len: int  # max_seq_length, else the tokenizer's model_max_length, within positions
    pooling: PoolingConfig  # sentence-transformers' Pooling (+ Normalize), else the family's default
    outputs: tuple[str, ...] = ("dense",)  # the embed task's output kinds; the first is the default
    sparse: SparseConfig | None = None
    multi_vector: MultiVectorConfig | None = None
    dense_layers: list[DenseConfig] = field(default_factory=list)  # after pooling, in order
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    pair_template: str | None = None  # score task of an LLM reranker (``ModelEntry.reranker``)
    default_instruction: str | None = None  # the template's {instruction}
    added_special_tokens: tuple[str, ...] = ()  # tokens the tokenizer must keep whole (PyLate's prefixes)
    # a CrossEncoder's activation_fn in config_sentence_transformers.json (a torch class path)
    st_activation_fn: str | None = None
    # LoRA task adapters a request picks by its prompt_name (``ModelEntry.task_adapters``)
    task_adapters: TaskAdapters | None = None

    @property
    def max_positions(self) -> int:
        return max_positions(self.hf_config, self.num_reserved_positions)

    def default_score_activation(self) -> str:
        """What sentence_transformers.CrossEncoder would apply to the logits: the activation_fn saved in
        config_sentence_transformers.json (>= 5.7), else in config.json (older versions), else sigmoid for
        one label and identity for several. Raises for an activation wde does not know (read only when no
        --score-activation is given)."""
        path = (
            self.st_activation_fn
            or (self.hf_config.get("sentence_transformers") or {}).get("activation_fn")
            or self.hf_config.get("sbert_ce_default_activation_function")
        )
        if path:
            name = str(path).rsplit(".", 1)[-1]
            if name not in _ST_ACTIVATIONS:
                raise ValueError(
                    f"the model asks for activation {path!r}, which wde does not know; "
                    f"pass --score-activation one of {sorted(_ST_ACTIVATIONS.values())}"
                )
            return _ST_ACTIVATIONS[name]
        return "sigmoid" if num_labels(self.hf_config) == 1 else "identity"


def read_model_info(model_path: str, tokenizer_path: str, task: str = "auto") -> ModelInfo:
    """``model_path`` / ``tokenizer_path``: local directories (resolved); ``task``: "auto" (the entry's first
    supported task), "embed" or "score"."""
    # 1. the architecture and the files it needs
    hf_config = read_hf_config(model_path)
    architecture, entry = resolve_architecture(hf_config.get("architectures"), model_path, hf_config)
    hf_config = entry.standard_config(hf_config)  # the names the engine reads
    check_model_files(model_path, tokenizer_path)
    st_metadata = read_st_metadata(model_path)
    # 2. the task, and what serving it needs from the tokenizer
    task = resolve_task(task, entry, architecture)
    hf_config = _reranker_config(hf_config, entry, task, tokenizer_path)
    # 3. outputs, lengths, pooling, scores
    outputs = read_served_outputs(entry, architecture, st_metadata, hf_config, model_path, tokenizer_path)
    num_reserved_positions = entry.reserved_positions(hf_config)
    limit = max_positions(hf_config, num_reserved_positions)
    reranker = entry.reranker if task == "score" else None
    return ModelInfo(
        model_path=model_path,
        tokenizer_path=tokenizer_path,
        architecture=architecture,
        model_entry=entry,
        task=task,
        hf_config=hf_config,
        num_reserved_positions=num_reserved_positions,
        default_max_model_len=_default_max_model_len(st_metadata.max_seq_length, model_path, limit),
        pooling=st_metadata.pooling or _default_pooling(entry),
        outputs=outputs.kinds,
        sparse=outputs.sparse,
        multi_vector=outputs.multi_vector,
        dense_layers=st_metadata.dense_layers,
        prompts=st_metadata.prompts,
        default_prompt_name=st_metadata.default_prompt_name,
        pair_template=reranker.pair_template if reranker is not None else None,
        default_instruction=reranker.default_instruction if reranker is not None else None,
        added_special_tokens=_prefix_tokens(tokenizer_path, st_metadata.prefix_tokens),
        st_activation_fn=st_metadata.activation_fn,
        task_adapters=entry.task_adapters(hf_config, model_path),
    )


def read_hf_config(model_path: str) -> dict[str, Any]:
    with open(Path(model_path) / "config.json", encoding="utf-8") as f:
        config: dict[str, Any] = json.load(f)
    return config


def resolve_task(task: str, entry: ModelEntry, architecture: str) -> str:
    """ "auto" -> the entry's first supported task; else the task, if its class serves it."""
    supported_tasks = entry.tasks
    if task == "auto":
        return supported_tasks[0]
    if task not in supported_tasks:
        raise ValueError(
            f"task {task!r} is not supported by {architecture}; it supports: {', '.join(supported_tasks)}"
        )
    return task


def _default_pooling(entry: ModelEntry) -> PoolingConfig:
    """Without sentence-transformers metadata: the family's own default (a decoder pools its last token),
    else CLS + normalize. A copy: flags may change it."""
    default = entry.default_pooling
    if default is None:
        return PoolingConfig(method="cls", normalize=True)
    return dataclasses.replace(default)


def _reranker_config(
    hf_config: dict[str, Any], entry: ModelEntry, task: str, tokenizer_path: str
) -> dict[str, Any]:
    """An LLM reranker (an entry with a ``reranker``, whose ``score_tokens`` are e.g. ("no", "yes"), served
    with task "score") scores with those tokens' logits: their ids go into the config the model is built
    from, and it has one label."""
    if task != "score" or entry.reranker is None:
        return hf_config
    tokens = entry.reranker.score_tokens
    from wde.tokenizer import Tokenizer

    vocabulary = Tokenizer.from_pretrained(tokenizer_path, max_length=1).backend
    ids = [vocabulary.token_to_id(token) for token in tokens]
    if None in ids:
        raise ValueError(
            f"the tokenizer in {tokenizer_path} has no token for one of {list(tokens)}, whose logits this "
            "reranker reads; is it the model's own tokenizer?"
        )
    config = {key: value for key, value in hf_config.items() if key not in ("id2label", "label2id")}
    return {**config, "num_labels": 1, "score_token_ids": ids}


def _prefix_tokens(tokenizer_path: str, prefixes: list[str]) -> tuple[str, ...]:
    if not prefixes:
        return ()
    from wde.tokenizer import tokens_to_keep_whole

    return tokens_to_keep_whole(tokenizer_path, prefixes)


def _default_max_model_len(st_max_seq_length: int | None, model_path: str, limit: int) -> int:
    """sentence-transformers max_seq_length, else the tokenizer's model_max_length; never past ``limit``
    (the usable positions)."""
    if st_max_seq_length:
        return min(st_max_seq_length, limit)
    tokenizer_config_path = Path(model_path) / "tokenizer_config.json"
    if tokenizer_config_path.exists():
        with tokenizer_config_path.open(encoding="utf-8") as f:
            model_max_length = json.load(f).get("model_max_length")
        if isinstance(model_max_length, int) and 0 < model_max_length < limit:
            return model_max_length
    return limit
