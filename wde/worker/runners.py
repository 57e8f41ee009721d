"""The model runner class of each device type: the worker's table (platforms give plain values only)."""

from __future__ import annotations

from wde.worker.cpu_model_runner import CPUModelRunner
from wde.worker.gpu_model_runner import GPUModelRunner
from wde.worker.model_runner import ModelRunnerBase

MODEL_RUNNERS: dict[str, type[ModelRunnerBase]] = {"cpu": CPUModelRunner, "cuda": GPUModelRunner}


def model_runner_cls(device_type: str) -> type[ModelRunnerBase]:
    if device_type not in MODEL_RUNNERS:
        raise ValueError(f"no model runner for device {device_type!r}; known: {sorted(MODEL_RUNNERS)}")
    return MODEL_RUNNERS[device_type]
