"""``--model-config models.yaml``: the models of a multi-model server, each with its own engine flags.

    models:
      - model: /models/all-MiniLM-L6-v2      # a local folder in Hugging Face layout
        served_model_name: minilm            # the name requests use (default: the model as given)
      - model: cross-encoder/ms-marco-MiniLM-L6-v2   # or a Hub id (fetched into the Hugging Face cache)
        revision: main                       # the Hub revision (branch, tag or commit)
        served_model_name: reranker
        max_num_batched_tokens: 4096         # any EngineArgs field (the `wde serve` engine flag, with _)

Each entry starts from the engine flags given on the command line, then sets its own keys.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from wde.engine_args import EngineArgs


def read_models_file(path: str, base: EngineArgs) -> list[EngineArgs]:
    """One EngineArgs per entry of the file (ValueError naming the entry and key for a bad one)."""
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"--model-config {path}: cannot be read ({e})") from e
    entries = document.get("models") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"--model-config {path}: expected a 'models:' list with one entry per model")
    return [_entry_args(path, index, entry, base) for index, entry in enumerate(entries)]


def _entry_args(path: str, index: int, entry: Any, base: EngineArgs) -> EngineArgs:
    where = f"--model-config {path}: models[{index}]"
    if not isinstance(entry, dict) or "model" not in entry:
        raise ValueError(
            f"{where} must be a mapping with a 'model' key (a local model folder or a Hub id ORG/NAME)"
        )
    known = set(EngineArgs.field_names())
    unknown = sorted(set(entry) - known)
    if unknown:
        raise ValueError(
            f"{where}: unknown keys {unknown}; use EngineArgs fields such as {sorted(known)[:8]}"
        )
    return dataclasses.replace(base, **entry)
