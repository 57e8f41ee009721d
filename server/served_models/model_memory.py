"""``check_models_fit``: a multi-model server refuses at start-up when its models cannot be loaded together.

Each model's budget is its own: its weights (the checkpoint files, scaled from the checkpoint's dtype to
the served one) plus the activations of one full batch (``max_num_batched_tokens`` tokens through the
widest layer, a few live buffers). The ``max_loaded_models`` largest must fit together in the memory
available now (CPU: the host's available memory; CUDA: the device's free memory times
--gpu-memory-utilization, the share each model's own budget is planned in). An estimate, on the safe side
for encoders; a model loaded on demand later is checked again by its own loader.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from wde.config import EngineConfig
from wde.platforms import get_platform, resolve_device

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
NUM_LIVE_ACTIVATION_BUFFERS = 4  # hidden states in and out, the MLP's wide one, attention's
AUTO_BUDGET_TOKENS = 2048  # a token budget still "auto" before loading: the CPU default
GIB = 2**30


def estimate_model_bytes(config: EngineConfig) -> int:
    """Weights as served plus one full batch's activations (bytes)."""
    model_config = config.model_config
    hf_config = model_config.hf_config
    served_bytes = DTYPE_BYTES.get(model_config.dtype, 4)
    checkpoint_dtype = str(hf_config.get("torch_dtype") or hf_config.get("dtype") or "float32")
    checkpoint_bytes = DTYPE_BYTES.get(checkpoint_dtype.removeprefix("torch."), 4)
    folder = Path(model_config.model)
    files = [path for path in folder.rglob("*") if path.suffix in WEIGHT_SUFFIXES] if folder.is_dir() else []
    if any(path.suffix == ".safetensors" for path in files):  # .bin copies of the same weights are not read
        files = [path for path in files if path.suffix != ".bin"]
    weight_bytes = sum(path.stat().st_size for path in files) * served_bytes // checkpoint_bytes
    if model_config.quantization == "int8":
        weight_bytes //= 2  # most weights as int8 next to their float32 originals' share
    width = max(int(hf_config.get("hidden_size", 1024)), int(hf_config.get("intermediate_size", 0)))
    num_tokens = config.scheduler_config.max_num_batched_tokens
    if not isinstance(num_tokens, int):  # "auto": the runner sizes it from this very estimate's memory
        num_tokens = AUTO_BUDGET_TOKENS
    activation_bytes = num_tokens * width * served_bytes * NUM_LIVE_ACTIVATION_BUFFERS
    return weight_bytes + activation_bytes


def available_bytes(config: EngineConfig) -> int:
    device_config = config.device_config
    device = resolve_device(device_config.device)
    free, _ = get_platform(device).memory_info()
    if device == "cpu":
        return free
    return int(free * device_config.gpu_memory_utilization)


def check_models_fit(
    models: Sequence[tuple[str, EngineConfig]], max_loaded_models: int, available: int | None = None
) -> None:
    """Raise ValueError naming every model's estimate when the ``max_loaded_models`` largest do not fit."""
    estimates = sorted(((estimate_model_bytes(config), name) for name, config in models), reverse=True)
    needed = sum(size for size, _ in estimates[:max_loaded_models])
    if available is None:
        available = available_bytes(models[0][1])
    if needed <= available:
        return
    listed = ", ".join(f"{name} {size / GIB:.2f} GiB" for size, name in estimates)
    raise ValueError(
        f"the models cannot be loaded together: {max_loaded_models} at once need about "
        f"{needed / GIB:.2f} GiB "
        f"(weights + one full batch each: {listed}) and {available / GIB:.2f} GiB is available; serve fewer "
        "models, lower --max-loaded-models (the others load on demand) or --max-num-batched-tokens"
    )
