"""The per-token float8 quantization kernels against the PyTorch ops they replace on a GPU
(``quantize_fp8_rows_reference``): the standalone one (``wde/layers/quantization/fp8_rows_kernel.py``) at the
widths Fp8Linear quantizes on Qwen3-Embedding-0.6B (hidden 1024, attention 2048, intermediate 3072) and the
4B (9728), with a strided row view, an all-zero row and a loud row; and the fused decoder kernels'
quantized outputs (add + RMSNorm, activation-and-mul: ``quantize=True``), each its own 16-bit output
quantized. Fp8Linear takes such an activation as it is.

Tolerance: none. Compiled on a GPU, the kernel equals the PyTorch ops bit for bit (the same float32 scale,
an IEEE division, round-to-nearest-even to e4m3). Under Triton 3.6's interpreter (the CPU) the float8 cast
itself is not the GPU's (it rounds half away from zero and drops the carry into the exponent: 1.97 x 2^6
becomes 2^6): there the expected values are the reference's scaled float32 values put through the
interpreter's own cast, so that everything but the cast is checked on the CPU, and the cast on the GPU."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest
import torch

from wde.layers.quantization.fp8_activation import Fp8Activation
from wde.layers.quantization.fp8_linear import FP8_DTYPE, FP8_MAX, MIN_SCALE, quantize_fp8_rows_reference

triton = pytest.importorskip("triton", reason="the kernel's tests need Triton (pip install triton)")
tl = pytest.importorskip("triton.language")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
WIDTHS = [1024, 2048, 3072, 9728]


def kernels_module(name: str) -> ModuleType:
    """A Triton kernels' module: compiled on a GPU, interpreted on the CPU (``tests/conftest.py`` turns the
    interpreter on before anything imports triton)."""
    if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no GPU, and TRITON_INTERPRET=1 was not set before triton was imported")
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def kernel() -> ModuleType:
    return kernels_module("wde.layers.quantization.fp8_rows_kernel")


@triton.jit
def _cast_kernel(x_ptr, out_ptr, size, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < size
    x = tl.load(x_ptr + cols, mask=mask)
    tl.store(out_ptr + cols, x.to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)


def expected_values(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference's (values, scale); on the interpreter its values cast by the interpreter."""
    values, scale = quantize_fp8_rows_reference(x)
    if DEVICE == "cuda":
        return values, scale
    scaled = (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).contiguous()
    cast = torch.empty(scaled.shape, dtype=FP8_DTYPE)
    _cast_kernel[(triton.cdiv(scaled.numel(), 1024),)](scaled, cast, scaled.numel(), BLOCK=1024)
    return cast, scale


def assert_equal(got: torch.Tensor, expected: torch.Tensor) -> None:
    differ = got.float() != expected.float()
    assert not differ.any(), f"{int(differ.sum())} of {differ.numel()} elements differ"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("width", WIDTHS)
def test_the_kernel_quantizes_as_the_pytorch_ops(kernel: ModuleType, width: int, dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(width)
    x = (torch.randn(5, width, generator=generator) * 3).to(DEVICE, dtype)
    x[1] = 0  # an all-zero row: zeros, the smallest scale
    x[3] *= 1000  # a loud row keeps its scale to itself
    values, scale = kernel.quantize_fp8_rows(x)
    expected, expected_scale = expected_values(x)
    assert values.dtype == FP8_DTYPE and values.shape == x.shape and scale.shape == (5, 1)
    assert torch.equal(scale, expected_scale)
    assert scale[1].item() == pytest.approx(MIN_SCALE / 448) and not values[1].float().any()
    assert_equal(values, expected)


def test_rows_of_a_wider_tensor(kernel: ModuleType) -> None:
    """A view whose rows are strided (the first half of a fused projection's output)."""
    generator = torch.Generator().manual_seed(0)
    wide = torch.randn(9, 2 * 1024, generator=generator).to(DEVICE, torch.float16)
    view = wide[:, :1024]
    values, scale = kernel.quantize_fp8_rows(view)
    expected, expected_scale = expected_values(view)
    assert torch.equal(scale, expected_scale) and values.is_contiguous()
    assert_equal(values, expected)


def test_no_rows(kernel: ModuleType) -> None:
    values, scale = kernel.quantize_fp8_rows(torch.empty(0, 64, device=DEVICE, dtype=torch.float16))
    assert values.shape == (0, 64) and scale.shape == (0, 1)


@pytest.fixture(scope="module")
def fused_kernels() -> ModuleType:
    return kernels_module("wde.layers.fused.triton_kernels")


# (hidden, norm flavour, post-norm): Qwen3-Embedding-0.6B's, EmbeddingGemma-300m's (with its post-norm)
NORM_SHAPES = [(1024, "llama", False), (768, "gemma", True)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("hidden", "flavour", "post_norm"), NORM_SHAPES)
def test_add_rms_norm_quantized_is_its_16_bit_output_quantized(
    fused_kernels: ModuleType, hidden: int, flavour: str, post_norm: bool, dtype: torch.dtype
) -> None:
    """The kernel's fp8 output (for an fp8 q/k/v or gate/up projection) is its own 16-bit output quantized
    per token, and the residual stream is the same either way."""
    generator = torch.Generator().manual_seed(hidden)
    x, residual = (torch.randn(6, hidden, generator=generator).to(DEVICE, dtype) for _ in range(2))
    weight, post = (torch.randn(hidden, generator=generator).to(DEVICE, dtype) for _ in range(2))
    post_weight = post if post_norm else None
    normed, summed = fused_kernels.add_rms_norm(x, residual, weight, 1e-6, flavour, post_weight)
    quantized, summed_too = fused_kernels.add_rms_norm(x, residual, weight, 1e-6, flavour, post_weight, True)
    expected, expected_scale = expected_values(normed)
    assert isinstance(quantized, Fp8Activation) and quantized.dtype == dtype
    assert torch.equal(summed_too, summed) and torch.equal(quantized.scale, expected_scale)
    assert_equal(quantized.values, expected)


# (intermediate, activation): Qwen3-Embedding-0.6B's (three column blocks), EmbeddingGemma-300m's (a partial
# second block), the 4B's (ten)
ACT_SHAPES = [(3072, "silu"), (1152, "gelu_tanh"), (9728, "silu")]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("intermediate", "activation"), ACT_SHAPES)
def test_act_and_mul_quantized_is_its_16_bit_output_quantized(
    fused_kernels: ModuleType, intermediate: int, activation: str, dtype: torch.dtype
) -> None:
    generator = torch.Generator().manual_seed(intermediate)
    gate_up = (torch.randn(5, 2 * intermediate, generator=generator) * 2).to(DEVICE, dtype)
    gate_up[2] = 0  # an all-zero row of products
    products = fused_kernels.act_and_mul(gate_up, activation)
    quantized = fused_kernels.act_and_mul(gate_up, activation, True)
    expected, expected_scale = expected_values(products)
    assert isinstance(quantized, Fp8Activation) and quantized.values.shape == (5, intermediate)
    assert torch.equal(quantized.scale, expected_scale)
    assert_equal(quantized.values, expected)


def test_fp8_linear_takes_a_quantized_activation() -> None:
    """An Fp8Activation skips the layer's own quantization and gives the same result as the 16-bit input it
    came from (on the CPU: torch._scaled_mm runs here too)."""
    from wde.layers.quantization.fp8_linear import Fp8Linear

    torch.manual_seed(0)
    layer = Fp8Linear.from_linear(torch.nn.Linear(64, 32).to(torch.bfloat16))
    x = torch.randn(7, 64).to(torch.bfloat16)
    values, scale = quantize_fp8_rows_reference(x)
    with torch.inference_mode():
        assert torch.equal(layer(Fp8Activation(values, scale, x.dtype)), layer(x))
