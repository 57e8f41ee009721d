"""sentence-transformers metadata of a model directory, so our defaults equal ``SentenceTransformer.encode``.

Reads ``modules.json``, the Pooling module's ``config.json``, the ``Dense`` modules after it (their
``config.json``; the pooler loads their weights), the ``Normalize`` module, a SparseEncoder's
``SpladePooling`` (after a ``Transformer`` / ``MLMTransformer``: SPLADE, sparse output), a
MultiVectorEncoder's token ``Dense`` + ``MultiVectorMask`` + ``Normalize`` (ColBERT, multi-vector output),
``sentence_bert_config.json`` (max_seq_length, older versions) and ``config_sentence_transformers.json``
(prompts, a CrossEncoder's activation). Plain JSON: no torch, no sentence-transformers import.

Modules are recognized by their class name, whichever package path the saving version wrote:
``sentence_transformers.models.Pooling`` (< 5.7) and
``sentence_transformers.sentence_transformer.modules.pooling.Pooling`` (>= 5.7) are both ``Pooling``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wde.config import DenseConfig, MultiVectorConfig, PoolingConfig, SparseConfig
from wde.model_folder.pylate_metadata import apply_pylate_colbert, is_pylate_colbert

_PACKAGE = "sentence_transformers."
_SUPPORTED_MODULES = (
    "Transformer",
    "MLMTransformer",
    "Pooling",
    "Dense",
    "Normalize",
    "SpladePooling",
    "MultiVectorMask",
)
_UNSUPPORTED_HINTS = {
    "Router": " (a Router, e.g. inference-free SPLADE with a SparseStaticEmbedding query side, is not "
    "supported yet)",
    "SparseStaticEmbedding": " (inference-free SPLADE's static query weights are not supported yet)",
    "SparseAutoEncoder": " (CSR sparse auto-encoders are not supported yet; SPLADE's SpladePooling is)",
}
_MODULE_ALIASES = {"pylate.models.Dense.Dense": "Dense"}
# A Dense module's activation_function is a torch class path ("torch.nn.modules.activation.Tanh").
_DENSE_ACTIVATIONS = {
    "Identity": "identity",
    "Tanh": "tanh",
    "Sigmoid": "sigmoid",
    "ReLU": "relu",
    "GELU": "gelu",
}

# sentence-transformers pooling mode -> our pooling method; the legacy ``pooling_mode_*`` booleans (< 5.7)
# and the ``pooling_mode`` string (>= 5.7) name the same modes.
_POOLING_MODES = {"cls": "cls", "mean": "mean", "max": "max", "lasttoken": "last"}
_LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


@dataclass
class SentenceTransformerMetadata:
    pooling: PoolingConfig | None = None
    dense_layers: list[DenseConfig] = field(default_factory=list)  # after pooling, in order
    max_seq_length: int | None = None
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    activation_fn: str | None = None  # a CrossEncoder's saved activation ("torch.nn...Sigmoid")
    sparse: SparseConfig | None = None  # a SparseEncoder's SpladePooling (+ its saved max_active_dims)
    sparse_dimension: int | None = None  # SpladePooling's embedding_dimension when saved (the vocabulary)
    # a MultiVectorEncoder's token vectors; its MultiVectorMask skiplist words (the tokenizer maps them)
    multi_vector: MultiVectorConfig | None = None
    skiplist_words: list[str] = field(default_factory=list)
    expansion_token: str | None = None  # query expansion's token (None: the mask token, else eos)
    prefix_tokens: list[str] = field(default_factory=list)  # PyLate's query / document prefixes

    @property
    def outputs(self) -> tuple[str, ...] | None:
        """The output kinds the saved modules produce: a SparseEncoder's sparse vectors, a
        MultiVectorEncoder's token vectors, a SentenceTransformer's pooled vector; None when the folder does
        not say."""
        if self.sparse is not None:
            return ("sparse",)
        if self.multi_vector is not None:
            return ("multi_vector",)
        return ("dense",) if self.pooling is not None else None


def _read_json(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def module_kind(module_type: str) -> str:
    """``sentence_transformers.base.modules.normalize.Normalize`` -> ``Normalize``; a class from another
    package keeps its full path (so the error names it), but PyLate's Dense (sentence-transformers' own)."""
    if module_type in _MODULE_ALIASES:
        return _MODULE_ALIASES[module_type]
    if module_type.startswith(_PACKAGE):
        return module_type.rsplit(".", 1)[-1]
    return module_type


def _pooling_modes(config: dict[str, Any]) -> list[str]:
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        return [mode] if isinstance(mode, str) else list(mode)
    return [mode for key, mode in _LEGACY_POOLING_KEYS.items() if config.get(key)]


def _read_pooling(module_dir: Path) -> PoolingConfig:
    config_path = module_dir / "config.json"
    config = _read_json(config_path)
    modes = _pooling_modes(config)
    if len(modes) != 1 or modes[0] not in _POOLING_MODES:
        raise ValueError(
            f"{config_path} asks for pooling {modes or 'none'}; wde supports exactly one of "
            f"{', '.join(_POOLING_MODES)}"
        )
    if config.get("include_prompt") is False:
        raise ValueError(
            f"{config_path} sets include_prompt: false (prompt tokens left out of the pooling), which wde "
            "does not support yet; serve a model that pools over the whole input"
        )
    return PoolingConfig(method=_POOLING_MODES[modes[0]])


def _read_dense(module_dir: Path) -> DenseConfig:
    config_path = module_dir / "config.json"
    config = _read_json(config_path)
    # sentence-transformers' default when the key is absent is Tanh
    activation_path = str(config.get("activation_function") or "torch.nn.modules.activation.Tanh")
    activation = _DENSE_ACTIVATIONS.get(activation_path.rsplit(".", 1)[-1])
    if not activation_path.startswith("torch.") or activation is None:
        raise ValueError(
            f"{config_path} asks for activation_function {activation_path!r}; wde supports the torch.nn "
            f"classes {', '.join(_DENSE_ACTIVATIONS)}"
        )
    if config.get("use_residual"):
        raise ValueError(f"{config_path} sets use_residual: true, which wde does not support yet")
    names = {config.get(key, "sentence_embedding") for key in ("module_input_name", "module_output_name")}
    if names not in ({"sentence_embedding"}, {"token_embeddings"}):
        raise ValueError(
            f"{config_path} maps {config.get('module_input_name')!r} to "
            f"{config.get('module_output_name')!r}; wde applies a Dense module to the pooled "
            "sentence_embedding or, in a multi-vector model, to the token_embeddings"
        )
    return DenseConfig(
        path=str(module_dir),
        in_features=int(config["in_features"]),
        out_features=int(config["out_features"]),
        bias=bool(config.get("bias", True)),
        activation=activation,
    )


def _read_splade_pooling(module_dir: Path) -> tuple[SparseConfig, int | None]:
    config_path = module_dir / "config.json"
    config = _read_json(config_path) if config_path.exists() else {}
    sparse = SparseConfig(
        pooling=str(config.get("pooling_strategy", "max")),
        activation=str(config.get("activation_function", "relu")),
    )
    try:
        sparse.verify()
    except ValueError as e:
        raise ValueError(f"{config_path}: {e}") from None
    # "word_embedding_dimension" is the name sentence-transformers < 5.4 saved
    dimension = config.get("embedding_dimension", config.get("word_embedding_dimension"))
    return sparse, int(dimension) if dimension else None


def _is_token_dense(module_dir: Path, multi_vector_model: bool) -> bool:
    """A Dense of token embeddings: so named, or unnamed in a multi-vector model (PyLate, ST < 5.4 saves)."""
    config = _read_json(module_dir / "config.json")
    if "module_input_name" not in config:
        return multi_vector_model
    return config["module_input_name"] == "token_embeddings"


def _normalizes_tokens(module_dir: Path) -> bool:
    """A Normalize module of token embeddings (a multi-vector model's), not of the pooled embedding."""
    config_path = module_dir / "config.json"
    config = _read_json(config_path) if config_path.exists() else {}
    return config.get("module_input_name") == "token_embeddings"


def _read_multi_vector_mask(module_dir: Path) -> tuple[list[str], bool]:
    """(skiplist words, whether queries are skiplisted too) of a MultiVectorMask module."""
    config_path = module_dir / "config.json"
    config = _read_json(config_path) if config_path.exists() else {}
    if config.get("keep_only_token_ids"):
        raise ValueError(f"{config_path} sets keep_only_token_ids (image-patch documents), not supported")
    tasks = config.get("skiplist_tasks") or ["document"]
    tasks = [tasks] if isinstance(tasks, str) else list(tasks)
    if "document" not in tasks:
        raise ValueError(f"{config_path}: skiplist_tasks {tasks} without 'document' is not supported")
    return list(config.get("skiplist_words") or []), "query" in tasks


def _read_multi_vector_lengths(model_dir: Path, metadata: SentenceTransformerMetadata) -> None:
    """The Transformer's query_length / document_length and query expansion (root
    sentence_bert_config.json); the expansion token's id is the tokenizer's to resolve."""
    multi_vector = metadata.multi_vector
    assert multi_vector is not None
    config_path = model_dir / "sentence_bert_config.json"
    config = _read_json(config_path) if config_path.exists() else {}
    for key in ("query_length", "document_length"):
        if config.get(key):
            setattr(multi_vector, key, int(config[key]))
    expansion = config.get("query_expansion")
    if expansion is None:
        return
    if not isinstance(expansion, dict) or not isinstance(expansion.get("length"), int):
        raise ValueError(f"{config_path}: query_expansion {expansion!r} needs a 'length' (an int)")
    multi_vector.query_expansion_length = int(expansion["length"])
    multi_vector.query_expansion_strategy = str(expansion.get("strategy", "fixed"))
    multi_vector.query_expansion_attend = bool(expansion.get("attend", False))
    metadata.expansion_token = expansion.get("token")


def read_st_metadata(model_dir: str | Path) -> SentenceTransformerMetadata:
    """Return what the directory says about pooling, normalization, max length, prompts and activation."""
    model_dir = Path(model_dir)
    metadata = SentenceTransformerMetadata()
    st_config_path = model_dir / "config_sentence_transformers.json"
    st_config = _read_json(st_config_path) if st_config_path.exists() else {}
    multi_vector_model = st_config.get("model_type") in ("MultiVectorEncoder", "ColBERT")

    # 1. modules.json: Transformer -> Pooling -> Dense* -> Normalize
    modules_path = model_dir / "modules.json"
    if modules_path.exists():
        pooling: PoolingConfig | None = None
        normalize = token_normalize = False
        for module in _read_json(modules_path):
            kind = module_kind(str(module.get("type", "")))
            if kind not in _SUPPORTED_MODULES:
                raise ValueError(
                    f"{modules_path} uses sentence-transformers module {module.get('type')!r}; "
                    f"wde supports {', '.join(_SUPPORTED_MODULES)}{_UNSUPPORTED_HINTS.get(kind, '')}"
                )
            if kind == "Pooling":
                pooling = _read_pooling(model_dir / module.get("path", ""))
            elif kind == "Dense" and _is_token_dense(model_dir / module.get("path", ""), multi_vector_model):
                if metadata.multi_vector is not None:
                    raise ValueError(
                        f"{modules_path}: wde applies one token Dense module in a multi-vector model"
                    )
                metadata.multi_vector = MultiVectorConfig(
                    projection=_read_dense(model_dir / module.get("path", "")), normalize=False
                )
            elif kind == "MultiVectorMask":
                metadata.multi_vector = metadata.multi_vector or MultiVectorConfig(normalize=False)
                metadata.skiplist_words, metadata.multi_vector.skiplist_queries = _read_multi_vector_mask(
                    model_dir / module.get("path", "")
                )
            elif kind == "Dense":
                if pooling is None or normalize:
                    raise ValueError(
                        f"{modules_path} has a Dense module {module.get('path')!r} outside Pooling -> "
                        "Dense -> Normalize; wde applies Dense modules to the pooled, not yet normalized "
                        "embedding"
                    )
                metadata.dense_layers.append(_read_dense(model_dir / module.get("path", "")))
            elif kind == "Normalize" and _normalizes_tokens(model_dir / module.get("path", "")):
                token_normalize = True
            elif kind == "Normalize":
                normalize = True
            elif kind == "SpladePooling":
                metadata.sparse, metadata.sparse_dimension = _read_splade_pooling(
                    model_dir / module.get("path", "")
                )
        if pooling is not None and metadata.sparse is not None:
            raise ValueError(
                f"{modules_path} has both Pooling and SpladePooling; wde serves one of them (a "
                "SentenceTransformer's Pooling or a SparseEncoder's SpladePooling)"
            )
        if pooling is not None:
            pooling.normalize = normalize
            metadata.pooling = pooling
        if metadata.multi_vector is not None:
            if pooling is not None or metadata.sparse is not None:
                raise ValueError(f"{modules_path} mixes a multi-vector model's modules with pooling")
            metadata.multi_vector.normalize = token_normalize
            _read_multi_vector_lengths(model_dir, metadata)

    # 2. max_seq_length (versions >= 5.7 keep it as the tokenizer's model_max_length instead)
    bert_config_path = model_dir / "sentence_bert_config.json"
    if bert_config_path.exists():
        max_seq_length = _read_json(bert_config_path).get("max_seq_length")
        metadata.max_seq_length = int(max_seq_length) if max_seq_length else None

    # 3. prompts and a CrossEncoder's activation
    if st_config:
        metadata.prompts = dict(st_config.get("prompts") or {})
        metadata.default_prompt_name = st_config.get("default_prompt_name") or None
        metadata.activation_fn = st_config.get("activation_fn") or None
        max_active_dims = st_config.get("max_active_dims")
        if metadata.sparse is not None and max_active_dims is not None:
            metadata.sparse.max_active_dims = int(max_active_dims)
        if metadata.sparse is not None and st_config.get("similarity_fn_name"):
            metadata.sparse.similarity = str(st_config["similarity_fn_name"])
        if metadata.multi_vector is not None and st_config.get("similarity_fn_name"):
            metadata.multi_vector.similarity = str(st_config["similarity_fn_name"])
    # 4. a PyLate <= 3 ColBERT: its prefixes, query expansion, skiplist and normalization
    if is_pylate_colbert(st_config):
        apply_pylate_colbert(st_config, metadata, str(st_config_path))
    return metadata
