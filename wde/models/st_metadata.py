"""sentence-transformers metadata of a model directory, so our defaults equal ``SentenceTransformer.encode``.

Reads ``modules.json``, the Pooling module's ``config.json``, the ``Normalize`` module,
``sentence_bert_config.json`` (max_seq_length) and ``config_sentence_transformers.json`` (prompts).
Plain JSON: no torch, no sentence-transformers import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from wde.config import PoolingConfig

_MODULE_PREFIX = "sentence_transformers.models."
_SUPPORTED_MODULES = ("Transformer", "Pooling", "Normalize")

# 1_Pooling/config.json key -> our pooling method
_POOLING_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_lasttoken": "last",
}
_UNSUPPORTED_MODES = ("pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens")


@dataclass
class SentenceTransformerMetadata:
    pooling: PoolingConfig | None = None
    max_seq_length: int | None = None
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None


def _read_json(path: Path) -> dict:
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def _read_pooling(module_dir: Path) -> PoolingConfig:
    config = _read_json(module_dir / "config.json")
    for key in _UNSUPPORTED_MODES:
        if config.get(key):
            raise ValueError(f"{module_dir}/config.json sets {key}, which wde does not support yet")
    methods = [method for key, method in _POOLING_MODES.items() if config.get(key)]
    if len(methods) != 1:
        raise ValueError(
            f"{module_dir}/config.json enables pooling modes {methods or 'none'}; "
            "wde supports exactly one of cls, mean, max, lasttoken"
        )
    return PoolingConfig(method=methods[0])


def read_st_metadata(model_dir: str | Path) -> SentenceTransformerMetadata:
    """Return what the directory says about pooling, normalization, max length and prompts."""
    model_dir = Path(model_dir)
    metadata = SentenceTransformerMetadata()

    modules_path = model_dir / "modules.json"
    if modules_path.exists():
        pooling: PoolingConfig | None = None
        normalize = False
        for module in _read_json(modules_path):
            kind = str(module.get("type", "")).removeprefix(_MODULE_PREFIX)
            if kind not in _SUPPORTED_MODULES:
                raise ValueError(
                    f"{modules_path} uses sentence-transformers module {module.get('type')!r}; "
                    f"wde supports {', '.join(_SUPPORTED_MODULES)}"
                )
            if kind == "Pooling":
                pooling = _read_pooling(model_dir / module.get("path", ""))
            elif kind == "Normalize":
                normalize = True
        if pooling is not None:
            pooling.normalize = normalize
            metadata.pooling = pooling

    bert_config_path = model_dir / "sentence_bert_config.json"
    if bert_config_path.exists():
        max_seq_length = _read_json(bert_config_path).get("max_seq_length")
        metadata.max_seq_length = int(max_seq_length) if max_seq_length else None

    st_config_path = model_dir / "config_sentence_transformers.json"
    if st_config_path.exists():
        st_config = _read_json(st_config_path)
        metadata.prompts = dict(st_config.get("prompts") or {})
        metadata.default_prompt_name = st_config.get("default_prompt_name") or None
    return metadata
