"""Fp8Linear (W8A8 float8 e4m3: per-row weights, per-token activations, ``torch._scaled_mm``) against
nn.Linear, which linears the fp8 quantizer swaps, and the refusals: a device without FP8 matrix units, the
CPU, a 32-bit dtype. ``torch._scaled_mm`` also runs on the CPU, so the arithmetic is tested here; its speed
only on a GPU (``benchmarks.gpu_check``).

Tolerance: e4m3 keeps 3 mantissa bits (a relative step of 1/16 at worst, ~1/50 on average per element); on
Gaussian data a row's error averages down to ~3.5% of its norm: at most 5%, and cosine >= 0.998 per row."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from wde.engine_args import EngineArgs
from wde.layers.quantization.fp8_linear import FP8_DTYPE, FP8_MAX, Fp8Linear, check_fp8_device
from wde.layers.quantization.quantize import block_linears, quantize_model

MAX_RELATIVE_ERROR = 0.05
MIN_COSINE = 0.998


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 64, 32), (37, 384, 1152), (5, 3, 128, 96)])
def test_fp8_linear_close_to_the_16_bit_linear(
    shape: tuple[int, ...], bias: bool, dtype: torch.dtype
) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(shape[-2], shape[-1], bias=bias).to(dtype)
    x = torch.randn(*shape[:-2], shape[-2]).to(dtype)  # any leading dims, as nn.Linear takes
    with torch.inference_mode():
        layer = Fp8Linear.from_linear(linear)
        expected, got = linear(x).float(), layer(x)
    assert layer.weight.dtype == FP8_DTYPE and layer.weight.float().abs().max() == FP8_MAX
    assert got.shape == expected.shape and got.dtype == dtype
    got = got.float()
    relative = ((got - expected).norm() / expected.norm()).item()
    assert relative < MAX_RELATIVE_ERROR, f"relative error {relative:.4f}"
    rows, expected_rows = got.reshape(-1, shape[-1]), expected.reshape(-1, shape[-1])
    assert torch.cosine_similarity(rows, expected_rows, dim=1).min() >= MIN_COSINE


def test_a_token_does_not_depend_on_its_batch_mates() -> None:
    torch.manual_seed(1)
    layer = Fp8Linear.from_linear(nn.Linear(64, 48).to(torch.bfloat16))
    batch = torch.randn(9, 64).to(torch.bfloat16)
    batch[4] *= 50  # a loud neighbour: per-token scales keep it to itself
    with torch.inference_mode():
        together = layer(batch)
        alone = torch.cat([layer(row[None]) for row in batch])
    assert torch.equal(together, alone)


def test_the_block_linears_the_fp8_gemm_takes_are_swapped() -> None:
    """Qwen3: q/k/v (fused), o, gate/up (fused) and down per layer, when both sizes are multiples of 16."""
    from tests.models.tiny_qwen3 import qwen3_config
    from wde.models.qwen3 import Qwen3Model

    config = {**qwen3_config(head_dim=32, intermediate_size=96), "vocab_size": 100}
    model = Qwen3Model(config).to(torch.bfloat16)
    num_layers = config["num_hidden_layers"]
    assert len(block_linears(model)) == 4 * num_layers
    assert quantize_model(model, "fp8") == 4 * num_layers
    assert all(isinstance(layer.mlp.down_proj, Fp8Linear) for layer in model.layers)
    assert isinstance(model.embed_tokens, nn.Embedding)

    odd = Qwen3Model({**config, "intermediate_size": 100})  # 100 is not a multiple of 16: kept in 16 bits
    assert quantize_model(odd, "fp8") == 2 * num_layers
    assert all(isinstance(layer.mlp.down_proj, nn.Linear) for layer in odd.layers)


def test_a_gpu_without_fp8_units_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(ValueError, match=r"compute capability 8.9 or newer.*A100-SXM4-80GB is 8\.0") as error:
        check_fp8_device(torch.device("cuda"))
    assert "\n" not in str(error.value)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    check_fp8_device(torch.device("cuda"))  # Hopper
    check_fp8_device(torch.device("cpu"))  # the config refuses the CPU (below), not the layer


def test_the_config_refuses_fp8_on_the_cpu_and_in_float32(tmp_path: Path) -> None:
    from tests.tiny_models import save_tiny_bert

    model = save_tiny_bert(tmp_path / "bert")
    with pytest.raises(ValueError, match="quantization 'fp8' runs on GPUs with FP8 matrix units only"):
        EngineArgs(model=str(model), device="cpu", quantization="fp8").create_engine_config()
    config = EngineArgs(model=str(model), device="cpu").create_engine_config()
    on_cuda = dataclasses.replace(
        config,
        model_config=dataclasses.replace(config.model_config, quantization="fp8", dtype="float32"),
        device_config=dataclasses.replace(config.device_config, device="cuda"),
    )
    with pytest.raises(ValueError, match="pass --dtype float16 or bfloat16"):
        on_cuda.verify()
    on_cuda.model_config.dtype = "bfloat16"
    on_cuda.verify()
