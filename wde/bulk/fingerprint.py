"""What an output directory was made from: the input's format and fields, the model and every setting that
changes a vector. Two runs with equal fingerprints write interchangeable parts, so a restart may resume; any
other run is refused rather than mixing vectors of two models in one output.

The input's bytes (size, sha256) are kept in the settings but left out of the fingerprint: a resume of a
changed input (a bad record fixed) checks the records already written, part by part, instead
(``wde/bulk/record_digest.py``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from wde.bulk.readers import InputSpec
from wde.config import ModelConfig

HASH_BLOCK_BYTES = 1 << 20
# settings["input"] keys that describe the file or how much of it a run takes, not what its records make:
# not fingerprinted (a changed file is checked part by part; a run with another --limit resumes)
INPUT_FILE_KEYS = ("num_bytes", "sha256", "limit")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


@dataclass(frozen=True)
class EncodeOptions:
    """The per-request encode options a bulk job applies to every text."""

    dimensions: int | None = None
    normalize: bool | None = None
    prompt_name: str | None = None

    def as_kwargs(self) -> dict[str, Any]:
        return asdict(self)


def fingerprint_settings(
    spec: InputSpec, model_config: ModelConfig, options: EncodeOptions
) -> dict[str, Any]:
    """The settings an output's vectors depend on, as plain JSON values (stored in the manifest, so a
    refusal can say which differ). The model is named by its files, not its path: a moved folder resumes."""
    return {
        "input": {
            "format": spec.format,
            "num_bytes": spec.path.stat().st_size,
            "sha256": file_sha256(spec.path),
            "text_field": spec.text_field,
            "id_field": spec.id_field,
            "limit": spec.limit,
        },
        "model": {
            "architecture": model_config.architecture,
            "config_sha256": file_sha256(Path(model_config.model) / "config.json"),
            "weights": _weight_sizes(Path(model_config.model)),
        },
        "encode": {
            "dtype": model_config.dtype,
            "max_model_len": model_config.max_model_len,
            "truncate": model_config.truncate,
            "long_input": model_config.long_input,
            "long_input_overlap": model_config.long_input_overlap,
            "pooling": model_config.pooling.method,
            "normalize": model_config.pooling.normalize if options.normalize is None else options.normalize,
            "dimensions": options.dimensions,
            "prompt_name": options.prompt_name or model_config.default_prompt_name,
            "quantization": model_config.quantization,
        },
    }


def fingerprint(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fingerprinted(settings), sort_keys=True).encode()).hexdigest()


def fingerprinted(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` without the input file's size and hash."""
    file_input = settings.get("input")
    if not isinstance(file_input, dict):
        return settings
    records_input = {key: value for key, value in file_input.items() if key not in INPUT_FILE_KEYS}
    return {**settings, "input": records_input}


def differences(stored: dict[str, Any], current: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted names of the settings that differ (``input.text_field``, ``encode.dimensions``)."""
    names: list[str] = []
    for key in sorted(set(stored) | set(current)):
        a, b = stored.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict) and key != "weights":
            names += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            names.append(f"{prefix}{key}")
    return names


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(HASH_BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def _weight_sizes(model_dir: Path) -> dict[str, int]:
    return {
        path.name: path.stat().st_size
        for path in sorted(model_dir.iterdir())
        if path.is_file() and path.suffix in WEIGHT_SUFFIXES
    }
