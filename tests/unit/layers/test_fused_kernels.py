"""The fused decoder kernels (``wde/layers/fused/triton_kernels.py``) under Triton's interpreter on the CPU
(``TRITON_INTERPRET=1``) against their PyTorch reference (``reference.py``, what the unfused layers
compute), on the shapes of the families that use them: Qwen3-Embedding-0.6B, gte-Qwen2-1.5B, e5-mistral-7b
(its attention heads; its width cut to keep the interpreter quick) and EmbeddingGemma-300m.

Tolerance: the kernels add, normalize and rotate in float32 where the reference rounds each product to the
model's dtype, so they differ by a few units in the last place: relative error (||out - ref|| / ||ref||)
at most 2e-3 in float16 and 1e-2 in bfloat16 (METHOD.md's ranges for 16-bit operands), and every element
written (the outputs start as NaN)."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from types import ModuleType

import pytest
import torch

from wde.layers.fused import ops, reference
from wde.layers.rotary import RotaryEmbedding

pytest.importorskip("triton", reason="the fused kernels' tests need Triton (pip install triton)")

KERNELS = "wde.layers.fused.triton_kernels"
MAX_RELATIVE_ERROR = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
NUM_TOKENS = 7


@dataclass(frozen=True)
class Shape:
    name: str
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    intermediate_size: int
    flavour: reference.NormFlavour
    qk_norm: bool
    activation: reference.Activation


SHAPES = [
    Shape("qwen3-0.6b", 1024, 16, 8, 128, 3072, "llama", True, "silu"),
    Shape("qwen2-1.5b", 1536, 12, 2, 128, 8960, "llama", False, "silu"),
    Shape("mistral-7b", 1024, 32, 8, 128, 3584, "llama", False, "silu"),
    Shape("gemma3-300m", 768, 3, 1, 256, 1152, "gemma", True, "gelu_tanh"),
]
DTYPES = [torch.float16, torch.bfloat16]


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def kernels() -> ModuleType:
    """The kernels' module: compiled on a GPU, interpreted on the CPU (``tests/conftest.py`` turns the
    interpreter on before anything imports triton)."""
    if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no GPU, and TRITON_INTERPRET=1 was not set before triton was imported")
    return importlib.import_module(KERNELS)


def assert_close(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert not got.isnan().any(), "an element was not written"
    error = (got.double() - expected.double()).norm() / expected.double().norm()
    assert error <= MAX_RELATIVE_ERROR[expected.dtype], f"relative error {error:.2e}"


def random(*shape: int, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=generator).to(device=DEVICE, dtype=dtype)


def seeded(shape: Shape, dtype: torch.dtype) -> torch.Generator:
    return torch.Generator().manual_seed(hash((shape.name, str(dtype))) % 2**31)


# (shape, post_norm): Gemma3 also normalizes a sublayer's output before the residual add
ADD_NORM_CASES = [(shape, False) for shape in SHAPES] + [(s, True) for s in SHAPES if s.flavour == "gemma"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("shape", "post_norm"),
    ADD_NORM_CASES,
    ids=[f"{s.name}-{'post' if p else 'pre'}" for s, p in ADD_NORM_CASES],
)
def test_add_rms_norm(kernels: ModuleType, shape: Shape, dtype: torch.dtype, post_norm: bool) -> None:
    generator = seeded(shape, dtype)
    x, residual = (random(NUM_TOKENS, shape.hidden_size, dtype=dtype, generator=generator) for _ in range(2))
    weight = random(shape.hidden_size, dtype=dtype, generator=generator)
    post_weight = random(shape.hidden_size, dtype=dtype, generator=generator) if post_norm else None
    got = kernels.add_rms_norm(x, residual, weight, 1e-6, shape.flavour, post_weight)
    expected = reference.add_rms_norm(x, residual, weight, 1e-6, shape.flavour, post_weight)
    for got_tensor, expected_tensor in zip(got, expected, strict=True):
        assert_close(got_tensor, expected_tensor)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_qk_norm_rotary_in_place(kernels: ModuleType, shape: Shape, dtype: torch.dtype) -> None:
    generator = seeded(shape, dtype)
    width = (shape.num_heads + 2 * shape.num_kv_heads) * shape.head_size
    qkv = random(NUM_TOKENS, width, dtype=dtype, generator=generator)
    positions = torch.tensor(
        [0, 1, 2, 3, 0, 1, 4095], device=DEVICE
    )  # two sequences' positions, and a far one
    cos, sin = RotaryEmbedding(shape.head_size, 1_000_000.0).cos_sin(positions, dtype)
    norm = None
    if shape.qk_norm:
        q_weight, k_weight = (random(shape.head_size, dtype=dtype, generator=generator) for _ in range(2))
        norm = (q_weight, k_weight, 1e-6, shape.flavour)
    expected = reference.qk_norm_rotary(qkv.clone(), shape.num_heads, shape.num_kv_heads, cos, sin, norm)
    got = kernels.qk_norm_rotary(qkv, shape.num_heads, shape.num_kv_heads, cos, sin, norm)
    for got_tensor, expected_tensor in zip(got, expected, strict=True):
        assert_close(got_tensor, expected_tensor)
    assert got[0].data_ptr() == qkv.data_ptr(), "q is rotated where it lies in qkv"
    assert torch.equal(got[2], expected[2]), "v passes unchanged"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_act_and_mul(kernels: ModuleType, shape: Shape, dtype: torch.dtype) -> None:
    gate_up = random(NUM_TOKENS, 2 * shape.intermediate_size, dtype=dtype, generator=seeded(shape, dtype))
    assert_close(
        kernels.act_and_mul(gate_up, shape.activation), reference.act_and_mul(gate_up, shape.activation)
    )


def test_no_tokens(kernels: ModuleType) -> None:
    empty = torch.empty(0, 64, dtype=torch.float16, device=DEVICE)
    weight = torch.ones(64, dtype=torch.float16, device=DEVICE)
    out, summed = kernels.add_rms_norm(empty, empty, weight, 1e-6, "llama")
    assert out.shape == summed.shape == (0, 64)
    assert kernels.act_and_mul(empty, "silu").shape == (0, 32)


def test_the_cpu_runs_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU (and with WDE_FUSED_KERNELS=0 anywhere) the ops are the reference itself."""
    x = torch.randn(3, 64)
    assert not ops.fused_kernels_enabled(x)
    weight = torch.randn(64)
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            ops.add_rms_norm(x, x, weight, 1e-6, "llama"),
            reference.add_rms_norm(x, x, weight, 1e-6, "llama"),
            strict=True,
        )
    )
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setenv(ops.DISABLE_VARIABLE, "0")
    assert not ops.fused_kernels_enabled(x)
    monkeypatch.setenv(ops.DISABLE_VARIABLE, "1")
    assert ops.fused_kernels_enabled(x) == ops.triton_available()
