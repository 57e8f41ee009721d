"""What Jina Embeddings v3's model folder says before load, torch-free (the family: ``wde/models/
jina_embeddings_v3.py``): whether a config published under XLM-R's names is Jina's (``is_jina_layout``), its
RoPE base under transformers' name (``standard_config``), and the LoRA task adapters a request may pick
(``read_task_adapters``: ``lora_adaptations`` where the checkpoint has LoRA weights)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from wde.config import TaskAdapters
from wde.model_folder.model_files import checkpoint_tensor_names, weight_files

# the fields that mark a config.json published for the remote code as Jina's, not a plain XLM-R
JINA_MARKERS = ("lora_adaptations", "rotary_emb_base")
# a published checkpoint's LoRA tensor: (the module's name, "A" or "B")
LORA_TENSOR = re.compile(r"^(.*)\.parametrizations\.weight\.0\.lora_([AB])$")


def is_jina_layout(config: dict[str, Any]) -> bool:
    """A config.json published for the remote code under XLM-R's names, with Jina's RoPE or adapters."""
    return config.get("position_embedding_type") == "rotary" or any(key in config for key in JINA_MARKERS)


def standard_config(config: dict[str, Any]) -> dict[str, Any]:
    """A published config with its RoPE base as transformers names it (``rope_parameters``); idempotent."""
    if "rope_parameters" in config or "rotary_emb_base" not in config:
        return config
    rope = {"rope_type": "default", "rope_theta": float(config["rotary_emb_base"])}
    return {**config, "rope_parameters": rope}


def served_task(config: dict[str, Any]) -> str | None:
    """The task adapter of a request that names none: ``default_task`` (None: the base weights)."""
    task = config.get("default_task")
    tasks = config.get("lora_adaptations") or []
    if task is not None and task not in tasks:
        raise ValueError(
            f"Jina v3 config.json names default_task {task!r}, which is not one of its lora_adaptations "
            f"{tasks}; set default_task to one of them, or remove it to serve the base weights"
        )
    return task


def task_adapters(config: dict[str, Any], tensor_names: Iterable[str]) -> TaskAdapters | None:
    """The adapters a request can pick: ``lora_adaptations`` where the checkpoint (``tensor_names``) has
    LoRA weights."""
    task = served_task(config)
    has_lora = any(LORA_TENSOR.match(name) for name in tensor_names)
    if task is not None and not has_lora:
        raise ValueError(
            f"config.json names default_task {task!r} but the checkpoint has no LoRA weights "
            "(parametrizations...lora_A / lora_B); remove default_task to serve the base weights"
        )
    names = tuple(config.get("lora_adaptations") or ())
    return TaskAdapters(names, task) if names and has_lora else None


def read_task_adapters(config: dict[str, Any], model_path: str) -> TaskAdapters | None:
    """``task_adapters`` of the checkpoint in ``model_path``."""
    return task_adapters(config, tensor_names(model_path))


def tensor_names(model_path: str) -> list[str]:
    """The checkpoint's tensor names: a safetensors header (no torch), else each ``pytorch_model*.bin``
    memory-mapped (its tensors are not read; torch is imported for it)."""
    names = checkpoint_tensor_names(model_path)
    if names is not None:
        return names
    import torch

    return [
        name
        for path in weight_files(model_path)
        for name in torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    ]
