"""The varlen CPU attention kernels (``varlen_cpu_avx512.c``, ``varlen_cpu_avx2.c``) against the naive
per-sequence oracle: lengths around the kernels' key blocks (16) and query blocks (8 / 4), every head size the
chosen kernel takes (multiples of 16 on AVX-512, of 8 on AVX2, up to 128, 112 included), grouped-query heads,
q / k / v as strided views of a fused projection, one sequence alone equal to the same sequence in a batch.
The tests run the kernel this CPU chooses; ``test_each_variant_matches_naive`` forces each variant in turn
(``WDE_VARLEN_ISA``) and skips, saying so, the one the CPU cannot run.

Tolerance: float32 with a different summation order and a polynomial exp2: max abs <= 1e-5 against naive on
unit-normal inputs; on the large-score inputs (x2, head size up to 128) both the kernel and naive float32 are
compared with a float64 oracle: the kernel's error at most 1.5x naive's own (+1e-6)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from tests.unit.layers.attention_oracle import float64_attention
from wde.layers.attention.backends import varlen_kernel
from wde.layers.attention.backends.naive import NaiveBackend
from wde.layers.attention.spec import AttentionSpec

TOLERANCE = 1e-5  # max abs difference from naive, float32, unit-normal inputs
SEQ_LENS = [1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 257]
HEAD_SIZES = (8, 16, 24, 32, 40, 48, 64, 72, 96, 112, 120, 128)

pytestmark = pytest.mark.skipif(
    bool(varlen_kernel.unavailable_reason()), reason=f"no varlen kernel: {varlen_kernel.unavailable_reason()}"
)


def _chosen_head_sizes() -> list[int]:
    variant, _ = varlen_kernel.chosen_variant()
    multiple = variant.head_size_multiple if variant is not None else 16
    return [h for h in HEAD_SIZES if h % multiple == 0]


@pytest.fixture
def fresh_choice() -> Iterator[None]:
    """The ISA choice is made once per process; tests that force one start and end with it undone."""
    varlen_kernel.clear_choice()
    yield
    varlen_kernel.clear_choice()


def _naive(spec: AttentionSpec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_lens: list[int]):
    backend = NaiveBackend(spec)
    return backend.forward(q, k, v, NaiveBackend.build_metadata(seq_lens, torch.device("cpu")))


def _kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_lens: list[int], scale: float):
    starts = torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()], dtype=torch.int64)
    return varlen_kernel.varlen_attention(q, k, v, starts, varlen_kernel.work_order(seq_lens), scale)


@pytest.mark.parametrize("head_size", _chosen_head_sizes())
def test_kernel_matches_naive_on_fused_qkv_views(head_size: int) -> None:
    torch.manual_seed(head_size)
    num_heads = 4
    qkv = torch.randn(sum(SEQ_LENS), 3, num_heads, head_size)
    q, k, v = qkv.unbind(1)  # strided views, as BERT's fused projection hands them over
    spec = AttentionSpec(num_heads=num_heads, head_size=head_size)
    out = _kernel(q, k, v, SEQ_LENS, spec.scale)
    assert (out - _naive(spec, q, k, v, SEQ_LENS)).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize("head_size", [h for h in _chosen_head_sizes() if h in (16, 32, 48, 64, 112, 128)])
def test_kernel_error_on_large_scores_is_naive_class(head_size: int) -> None:
    torch.manual_seed(head_size)
    qkv = torch.randn(sum(SEQ_LENS), 3, 4, head_size) * 2
    q, k, v = qkv.unbind(1)
    spec = AttentionSpec(num_heads=4, head_size=head_size)
    oracle = float64_attention(q, k, v, SEQ_LENS, spec.scale)
    naive_error = (_naive(spec, q, k, v, SEQ_LENS).double() - oracle).abs().max().item()
    kernel_error = (_kernel(q, k, v, SEQ_LENS, spec.scale).double() - oracle).abs().max().item()
    assert kernel_error <= 1.5 * naive_error + 1e-6, (kernel_error, naive_error)


def test_kernel_grouped_query_heads_and_custom_scale() -> None:
    torch.manual_seed(0)
    seq_lens = [7, 20, 64]
    q = torch.randn(sum(seq_lens), 8, 64)
    k, v = torch.randn(sum(seq_lens), 2, 64), torch.randn(sum(seq_lens), 2, 64)
    spec = AttentionSpec(num_heads=8, head_size=64, num_kv_heads=2, scale=0.3)
    out = _kernel(q, k, v, seq_lens, spec.scale)
    torch.testing.assert_close(out, _naive(spec, q, k, v, seq_lens), atol=TOLERANCE, rtol=TOLERANCE)


BF16_REASON = varlen_kernel.bf16_products_reason()


@pytest.mark.parametrize(
    "bf16_products",
    [
        False,
        pytest.param(True, marks=pytest.mark.skipif(bool(BF16_REASON), reason=f"no bf16: {BF16_REASON}")),
    ],
)
def test_kernel_sequence_alone_equals_in_batch(bf16_products: bool) -> None:
    """Also the bf16-products kernel's (varlen_cpu_avx512bf16.c: an int8 model's layers)."""
    torch.manual_seed(1)
    seq_lens = [30, 81, 5]
    q, k, v = torch.randn(3, sum(seq_lens), 12, 32).unbind(0)
    starts = torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()], dtype=torch.int64)
    batched = varlen_kernel.varlen_attention(
        q, k, v, starts, varlen_kernel.work_order(seq_lens), 0.2, bf16_products=bf16_products
    )
    alone = varlen_kernel.varlen_attention(
        q[30:111],
        k[30:111],
        v[30:111],
        torch.tensor([0, 81], dtype=torch.int64),
        varlen_kernel.work_order([81]),
        0.2,
        bf16_products=bf16_products,
    )
    assert torch.equal(batched[30:111], alone)  # same arithmetic, bit for bit


def test_kernel_extreme_scores_stay_finite() -> None:
    q = torch.full((40, 2, 32), 30.0)
    k = torch.linspace(-30, 30, 40 * 2 * 32).view(40, 2, 32)
    v = torch.randn(40, 2, 32)
    out = _kernel(q, k, v, [40], 1.0)
    spec = AttentionSpec(num_heads=2, head_size=32, scale=1.0)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, _naive(spec, q, k, v, [40]), atol=TOLERANCE, rtol=TOLERANCE)


@pytest.mark.parametrize("isa", list(varlen_kernel.VARIANTS))
def test_each_variant_matches_naive(isa: str, fresh_choice: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """WDE_VARLEN_ISA forces a kernel (the AVX2 one on an AVX-512 CPU); one the CPU lacks is refused."""
    monkeypatch.setenv(varlen_kernel.ISA_ENV, isa)
    variant, reason = varlen_kernel.chosen_variant()
    if variant is None:
        assert "this CPU lacks" in reason and varlen_kernel.unavailable_reason() == reason
        pytest.skip(f"the {isa} kernel cannot run here: {reason}")
    assert variant.isa == isa and varlen_kernel.unavailable_reason() == ""
    torch.manual_seed(3)
    seq_lens = [2, 16, 17, 70]
    for head_size in (16, 64, 112):
        q, k, v = torch.randn(3, sum(seq_lens), 6, head_size).unbind(0)
        k, v = k[:, :2], v[:, :2]  # 3 query heads per kv head
        spec = AttentionSpec(num_heads=6, head_size=head_size, num_kv_heads=2)
        out = _kernel(q, k, v, seq_lens, spec.scale)
        assert (out - _naive(spec, q, k, v, seq_lens)).abs().max().item() <= TOLERANCE, head_size


@pytest.mark.parametrize("isa", list(varlen_kernel.VARIANTS))
def test_each_variant_adds_a_position_bias_as_naive_does(
    isa: str, fresh_choice: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MPNet's bias [heads, L, L] (L past the longest sequence, a sliced view with a row stride of its own),
    indexed by position within each sequence, on lengths around the key blocks: as naive adds it."""
    monkeypatch.setenv(varlen_kernel.ISA_ENV, isa)
    if varlen_kernel.chosen_variant()[0] is None:
        pytest.skip(f"the {isa} kernel cannot run here")
    torch.manual_seed(5)
    seq_lens = [1, 5, 16, 17, 40, 33]
    spec = AttentionSpec(num_heads=4, head_size=32, position_bias=True)
    q, k, v = torch.randn(3, sum(seq_lens), 4, 32).unbind(0)
    bias = (torch.randn(4, 64, 64) * 2.0)[:, :45, :45]  # rows 64 floats apart, 45 >= the longest (40)
    starts = torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()], dtype=torch.int64)
    out = varlen_kernel.varlen_attention(
        q, k, v, starts, varlen_kernel.work_order(seq_lens), spec.scale, bias
    )
    naive = NaiveBackend(spec).forward(
        q, k, v, NaiveBackend.build_metadata(seq_lens, torch.device("cpu")), position_bias=bias
    )
    assert (out - naive).abs().max().item() <= TOLERANCE
    assert (out - _kernel(q, k, v, seq_lens, spec.scale)).abs().max().item() > 1e-2, "the bias moves outputs"
    with pytest.raises(ValueError, match="L >= 40"):
        varlen_kernel.varlen_attention(
            q, k, v, starts, varlen_kernel.work_order(seq_lens), 1.0, bias[:, :30, :30]
        )


def test_unknown_isa_is_refused_with_the_choices(fresh_choice: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(varlen_kernel.ISA_ENV, "sse2")
    assert varlen_kernel.chosen_variant() == (None, "WDE_VARLEN_ISA='sse2' is not one of avx512, avx2")
