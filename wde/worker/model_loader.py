"""Builds a model from a local HF directory: config.json + model.safetensors (or pytorch_model.bin). The class
is the architecture's registry entry (``wde/model_folder/registry.py``), imported here by its name."""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from safetensors import safe_open

from wde.config import ModelConfig
from wde.layers.attention.backend import AttentionBackend
from wde.layers.attention.layer import attention_specs, bind_attention_backend
from wde.layers.attention.spec import AttentionSpec
from wde.layers.quantization.quantize import SMOOTHED, quantize_model
from wde.layers.quantization.smoothing import smoothing_enabled
from wde.model_folder.model_files import check_model_files, weight_files
from wde.model_folder.registry import ModelEntry, resolve_architecture
from wde.models.interface import WdeModel
from wde.worker.calibration_pass import calibration_input_maxima

logger = logging.getLogger(__name__)


def iterate_weights(model_dir: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, CPU tensor) from every *.safetensors file, else from pytorch_model*.bin (weights_only)."""
    files = weight_files(model_dir)
    if not files:
        check_model_files(model_dir, model_dir)  # raises, naming what is missing
    for path in files:
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt", device="cpu") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                    yield name, f.get_tensor(name)
        else:
            yield from torch.load(str(path), map_location="cpu", weights_only=True).items()


def model_class(entry: ModelEntry) -> type[WdeModel]:
    """The ``WdeModel`` subclass an entry names (``"wde.models.bert:BertModel"``), its module imported now."""
    module_name, class_name = entry.class_path.split(":")
    model_cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(model_cls, type) and issubclass(model_cls, WdeModel)):
        raise TypeError(
            f"{entry.class_path} is not a WdeModel subclass; fix its entry in wde/model_folder/registry.py"
        )
    return model_cls


BackendChooser = Callable[[list[AttentionSpec]], type[AttentionBackend]]


def load_model(
    model_config: ModelConfig, choose_backend: BackendChooser, device: torch.device, dtype: torch.dtype
) -> WdeModel:
    """The model with its weights; ``choose_backend(specs)`` picks the attention backend class that every
    layer's spec allows (the model decides its specs: heads, kv heads, head size, causal, windows)."""
    _, entry = resolve_architecture(
        model_config.hf_config.get("architectures"), model_config.model, model_config.hf_config
    )
    model_cls = model_class(entry)
    # 1. build without initializing (every weight comes from the checkpoint)
    with torch.device("meta"):
        model = model_cls(model_config.hf_config)
    # 2. one attention backend instance per layer, of a class that honours every layer's spec
    backend_cls = choose_backend(attention_specs(model))
    bind_attention_backend(model, backend_cls)
    model = model.to_empty(device=device).to(dtype)
    # 3. copy the checkpoint in
    model.load_weights(iterate_weights(model_config.model))
    model.eval()
    # 4. quantize the blocks' weights when asked to (int8: smoothed by a calibration pass's activations)
    if model_config.quantization is not None:
        input_maxima, start = None, time.perf_counter()
        if model_config.quantization in SMOOTHED and smoothing_enabled():
            input_maxima = calibration_input_maxima(model, model_config, backend_cls, device)
        num_layers = quantize_model(model, model_config.quantization, input_maxima)
        logger.info(
            "quantization %s: %d linear layers in %.2fs%s",
            model_config.quantization,
            num_layers,
            time.perf_counter() - start,
            " (calibration pass included)" if input_maxima else "",
        )
    return model
