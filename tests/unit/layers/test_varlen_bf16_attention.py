"""The bf16-products varlen kernel (``varlen_cpu_avx512bf16.c``: the attention of an int8 model's layers where
the CPU has AVX512-BF16) against a float64 oracle and against the float32 kernel: lengths around the key
blocks (16), query blocks (8) and key pairs, every head size the AVX-512 kernels take (odd multiples of 16
included: half a 16-word transpose), grouped-query heads, strided q / k / v views, a position bias, bfloat16
tensors in and out (a bfloat16 model's: ``-DWDE_BF16_IO``); and the layers that get it
(``AttentionSpec.bf16_products``, set by ``quantize_int8``). Batch == single: test_varlen_attention.py. The
kernel tests skip, saying why, on a CPU without AVX512-BF16; the build tests run on any x86 machine.

Tolerance: q, k, v, and the probabilities are rounded to bf16 (8 significant bits, a relative rounding of at
most 2^-9), the sums are float32, so a score's error grows with the score: on unit-normal inputs the output
stays within 4e-2 of the float64 oracle (measured: 7e-3 to 1.1e-2 at scale head_size^-0.5, 2.2e-2 at
scale 0.3 with head size 64, the bias included) and every token's output vector has cosine >= 0.9998 with
it (measured >= 0.99997)."""

from __future__ import annotations

import platform
import shutil
from collections.abc import Iterator

import pytest
import torch

from tests.unit.layers.attention_oracle import float64_attention
from wde.layers.attention.backends import varlen_kernel
from wde.layers.attention.backends.varlen_cpu import VarlenCpuBackend
from wde.layers.attention.layer import Attention, bind_attention_backend
from wde.layers.attention.spec import AttentionSpec
from wde.layers.quantization.quantize import allow_bf16_attention

MAX_ABS = 4e-2
MIN_COSINE = 0.9998
SEQ_LENS = [1, 2, 3, 8, 9, 15, 16, 17, 31, 33, 100, 257]
HEAD_SIZES = (16, 32, 48, 64, 80, 96, 112, 128)

needs_bf16 = pytest.mark.skipif(
    bool(varlen_kernel.bf16_products_reason()),
    reason=f"no bf16-products kernel here: {varlen_kernel.bf16_products_reason()}",
)


@pytest.fixture
def fresh_choice() -> Iterator[None]:
    varlen_kernel.clear_choice()
    yield
    varlen_kernel.clear_choice()


def _starts(seq_lens: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()], dtype=torch.int64)


def _kernel(
    q, k, v, seq_lens: list[int], scale: float, bias=None, bf16_products: bool = True
) -> torch.Tensor:
    order = varlen_kernel.work_order(seq_lens)
    return varlen_kernel.varlen_attention(
        q, k, v, _starts(seq_lens), order, scale, bias, bf16_products=bf16_products
    )


def _oracle(q, k, v, seq_lens: list[int], scale: float, bias=None) -> torch.Tensor:
    return float64_attention(q, k, v, seq_lens, scale, bias).float()


def _assert_close_to_oracle(out: torch.Tensor, oracle: torch.Tensor) -> None:
    assert (out - oracle).abs().max().item() <= MAX_ABS
    cosine = torch.nn.functional.cosine_similarity(out.flatten(1), oracle.flatten(1), dim=1)
    assert cosine.min().item() >= MIN_COSINE


@needs_bf16
@pytest.mark.parametrize("head_size", HEAD_SIZES)
def test_bf16_kernel_is_close_to_float64_on_fused_qkv_views(head_size: int) -> None:
    torch.manual_seed(head_size)
    qkv = torch.randn(sum(SEQ_LENS), 3, 4, head_size)
    q, k, v = qkv.unbind(1)  # strided views of a fused projection
    scale = head_size**-0.5
    out = _kernel(q, k, v, SEQ_LENS, scale)
    _assert_close_to_oracle(out, _oracle(q, k, v, SEQ_LENS, scale))
    assert not torch.equal(out, _kernel(q, k, v, SEQ_LENS, scale, bf16_products=False)), "bf16 rounds"


@needs_bf16
def test_bf16_kernel_grouped_query_heads_custom_scale_and_position_bias() -> None:
    torch.manual_seed(2)
    seq_lens = [5, 16, 17, 40, 33]
    q = torch.randn(sum(seq_lens), 6, 64)
    k, v = torch.randn(sum(seq_lens), 2, 64), torch.randn(sum(seq_lens), 2, 64)  # 3 query heads a kv head
    _assert_close_to_oracle(_kernel(q, k, v, seq_lens, 0.3), _oracle(q, k, v, seq_lens, 0.3))
    bias = (torch.randn(6, 64, 64) * 2.0)[:, :45, :45]  # a sliced view with rows 64 floats apart
    out = _kernel(q, k, v, seq_lens, 0.3, bias)
    _assert_close_to_oracle(out, _oracle(q, k, v, seq_lens, 0.3, bias))


@needs_bf16
@pytest.mark.parametrize("head_size", (32, 48, 128))
def test_bfloat16_tensors_in_and_out(head_size: int) -> None:
    """A bfloat16 model's layers: the same products on the tensors as they are, the output rounded once."""
    torch.manual_seed(head_size)
    qkv = torch.randn(sum(SEQ_LENS), 3, 4, head_size).bfloat16()
    q, k, v = qkv.unbind(1)
    scale = head_size**-0.5
    out = _kernel(q, k, v, SEQ_LENS, scale, bf16_products=False)  # bfloat16 tensors take it anyway
    assert out.dtype == torch.bfloat16
    _assert_close_to_oracle(out.float(), _oracle(q, k, v, SEQ_LENS, scale))
    from_float32 = _kernel(q.float(), k.float(), v.float(), SEQ_LENS, scale)  # inputs exact in bf16 already
    assert torch.equal(out, from_float32.bfloat16())


@needs_bf16
def test_bf16_kernel_extreme_scores_stay_finite() -> None:
    q = torch.full((40, 2, 32), 30.0)
    k = torch.linspace(-30, 30, 40 * 2 * 32).view(40, 2, 32)
    v = torch.randn(40, 2, 32)
    out = _kernel(q, k, v, [40], 1.0)
    assert torch.isfinite(out).all()
    # the scores are ~1e4 apart: the softmax is one-hot on the same key as in float64
    torch.testing.assert_close(out, _oracle(q, k, v, [40], 1.0), atol=MAX_ABS, rtol=0)


@pytest.mark.parametrize("variant", [varlen_kernel.BF16_VARIANT, varlen_kernel.BF16_IO_VARIANT])
def test_bf16_variants_compile(variant: varlen_kernel.KernelVariant) -> None:
    """The source builds both ways on any x86 machine with a C compiler, whether or not this CPU runs it."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None or platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("needs an x86 machine with a C compiler")
    library = varlen_kernel.build(compiler, variant)
    assert library.is_file() and library.name.startswith(f"varlen_cpu_{variant.isa}_")


def test_the_float32_kernel_runs_when_switched_off_or_on_avx2(
    fresh_choice: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(varlen_kernel.BF16_ENV, "0")
    assert varlen_kernel.bf16_products_reason() == "switched off by WDE_VARLEN_BF16=0"
    monkeypatch.delenv(varlen_kernel.BF16_ENV)
    monkeypatch.setenv(varlen_kernel.ISA_ENV, "avx2")
    varlen_kernel.clear_choice()
    if varlen_kernel.chosen_variant()[0] is not None:
        assert varlen_kernel.bf16_products_reason() == "the avx2 kernel is the chosen one"


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            [Attention(AttentionSpec(num_heads=2, head_size=32)) for _ in range(2)]
        )


@pytest.mark.skipif(bool(varlen_kernel.unavailable_reason()), reason="no varlen kernel here")
def test_an_int8_models_layers_allow_bf16_products_and_get_a_backend_made_for_it() -> None:
    model = TwoLayers()
    bind_attention_backend(model, VarlenCpuBackend)
    assert all(not layer.backend.bf16_products for layer in model.layers)  # type: ignore[union-attr]
    allow_bf16_attention(model)  # what quantize_int8 does after swapping the linears
    for layer in model.layers:
        assert layer.spec.bf16_products and isinstance(layer.backend, VarlenCpuBackend)
        assert layer.backend.spec is layer.spec
        assert layer.backend.bf16_products == (not varlen_kernel.bf16_products_reason())
    assert "bf16 products allowed" in model.layers[0].spec.describe()
