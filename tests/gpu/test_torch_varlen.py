"""On CUDA: torch_varlen (torch's varlen FlashAttention-2) equals the naive oracle (float32 arithmetic on the
unrounded inputs) for every spec it accepts (plain, causal, sliding windows, grouped-query heads, a custom
scale), on random q / k / v in a batch of mixed lengths (1 to 512 tokens).

Tolerance: relative error ``||out - ref|| / ||ref||`` at most 5e-3 in float16 (11-bit mantissa) and 2e-2 in
bfloat16 (8-bit), the ranges half-precision operands with float32 accumulation land in.
"""

from __future__ import annotations

import pytest
import torch

from wde.layers.attention.backend import AttentionBackend
from wde.layers.attention.backends.naive import NaiveBackend
from wde.layers.attention.backends.torch_varlen import TorchVarlenBackend
from wde.layers.attention.spec import AttentionSpec

MAX_RELATIVE_ERROR = {torch.float16: 5e-3, torch.bfloat16: 2e-2}
SEQ_LENS = [1, 7, 128, 300, 64, 512, 33]
SPECS = [
    AttentionSpec(num_heads=12, head_size=64),  # BERT-base
    AttentionSpec(num_heads=12, head_size=32),  # MiniLM
    AttentionSpec(num_heads=16, head_size=128, causal=True),
    AttentionSpec(num_heads=8, head_size=64, num_kv_heads=2, causal=True),
    AttentionSpec(num_heads=8, head_size=64, sliding_window=(32, 32)),
    AttentionSpec(num_heads=8, head_size=96, causal=True, sliding_window=(16, 0), scale=0.05),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("spec", SPECS, ids=[spec.describe() for spec in SPECS])
def test_equals_naive(spec: AttentionSpec, dtype: torch.dtype) -> None:
    available, reason = TorchVarlenBackend.is_available("cuda", dtype)
    if not available:
        pytest.skip(reason)
    supported, reason = TorchVarlenBackend.supports(spec)
    if not supported:
        pytest.skip(reason)
    device = torch.device("cuda")
    generator = torch.Generator(device).manual_seed(0)
    num_tokens = sum(SEQ_LENS)
    query = torch.randn(num_tokens, spec.num_heads, spec.head_size, device=device, generator=generator)
    key, value = (
        torch.randn(num_tokens, spec.num_kv_heads, spec.head_size, device=device, generator=generator)
        for _ in range(2)
    )
    metadata = AttentionBackend.build_metadata(SEQ_LENS, device)
    expected = NaiveBackend(spec).forward(query, key, value, metadata).double()
    torch.cuda.synchronize()
    ours = TorchVarlenBackend(spec).forward(query.to(dtype), key.to(dtype), value.to(dtype), metadata)
    torch.cuda.synchronize()
    assert ours.shape == expected.shape and ours.dtype == dtype
    assert torch.isfinite(ours).all()
    error = (ours.double() - expected).norm() / expected.norm()
    assert error <= MAX_RELATIVE_ERROR[dtype], f"relative error {error:.2e}"
