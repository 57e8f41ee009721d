"""The varlen CPU attention kernel (``varlen_cpu.c``) against the naive per-sequence oracle: lengths around
the kernel's 16-key and 8-query blocks, every head size it takes, grouped-query heads, q / k / v as strided
views of a fused projection, one sequence alone equal to the same sequence in a batch; and the torch_sdpa
backend's dispatch (kernel for plain specs, the grouped SDPA path for causal / windowed / biased layers and
when switched off). Tolerance: float32 with a different summation order and a polynomial exp2, ~1e-6 on unit
inputs; on the large-score test inputs (x2, head size up to 128) both the kernel and naive float32 are
compared with a float64 oracle: the kernel's error at most 1.5x naive's own (+1e-6)."""

from __future__ import annotations

import pytest
import torch

from wde.layers.attention.backends import varlen_kernel as varlen_cpu
from wde.layers.attention.backends.naive import NaiveBackend
from wde.layers.attention.backends.torch_sdpa import TorchSdpaBackend
from wde.layers.attention.spec import AttentionSpec

TOLERANCE = 1e-5

pytestmark = pytest.mark.skipif(not varlen_cpu.available(), reason="no AVX-512F CPU or no C compiler")


def _naive(spec: AttentionSpec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_lens: list[int]):
    backend = NaiveBackend(spec)
    return backend.forward(q, k, v, NaiveBackend.build_metadata(seq_lens, torch.device("cpu")))


def _kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_lens: list[int], scale: float):
    starts = torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()], dtype=torch.int64)
    return varlen_cpu.varlen_attention(q, k, v, starts, varlen_cpu.work_order(seq_lens), scale)


def _float64_oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_lens: list[int], scale: float):
    outputs, start = [], 0
    for n in seq_lens:
        qs, ks, vs = (t[start : start + n].double().transpose(0, 1) for t in (q, k, v))  # [heads, n, d]
        attended = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, scale=scale)
        outputs.append(attended.transpose(0, 1))
        start += n
    return torch.cat(outputs)


@pytest.mark.parametrize("head_size", [16, 32, 48, 64, 128])
def test_kernel_matches_naive_on_fused_qkv_views(head_size: int) -> None:
    torch.manual_seed(head_size)
    seq_lens = [1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 257]
    num_heads = 4
    qkv = torch.randn(sum(seq_lens), 3, num_heads, head_size) * 2
    q, k, v = qkv.unbind(1)  # strided views, as BERT's fused projection hands them over
    spec = AttentionSpec(num_heads=num_heads, head_size=head_size)
    out = _kernel(q, k, v, seq_lens, spec.scale)
    oracle = _float64_oracle(q, k, v, seq_lens, spec.scale)
    naive_error = (_naive(spec, q, k, v, seq_lens).double() - oracle).abs().max().item()
    kernel_error = (out.double() - oracle).abs().max().item()
    assert kernel_error <= 1.5 * naive_error + 1e-6, (kernel_error, naive_error)


def test_kernel_grouped_query_heads_and_custom_scale() -> None:
    torch.manual_seed(0)
    seq_lens = [7, 20, 64]
    q = torch.randn(sum(seq_lens), 8, 64)
    k, v = torch.randn(sum(seq_lens), 2, 64), torch.randn(sum(seq_lens), 2, 64)
    spec = AttentionSpec(num_heads=8, head_size=64, num_kv_heads=2, scale=0.3)
    out = _kernel(q, k, v, seq_lens, spec.scale)
    torch.testing.assert_close(out, _naive(spec, q, k, v, seq_lens), atol=TOLERANCE, rtol=TOLERANCE)


def test_kernel_sequence_alone_equals_in_batch() -> None:
    torch.manual_seed(1)
    seq_lens = [30, 81, 5]
    q, k, v = torch.randn(3, sum(seq_lens), 12, 32).unbind(0)
    batched = _kernel(q, k, v, seq_lens, 0.2)
    alone = _kernel(q[30:111], k[30:111], v[30:111], [81], 0.2)
    assert torch.equal(batched[30:111], alone)  # same arithmetic, bit for bit


def test_kernel_extreme_scores_stay_finite() -> None:
    q = torch.full((40, 2, 32), 30.0)
    k = torch.linspace(-30, 30, 40 * 2 * 32).view(40, 2, 32)
    v = torch.randn(40, 2, 32)
    out = _kernel(q, k, v, [40], 1.0)
    spec = AttentionSpec(num_heads=2, head_size=32, scale=1.0)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, _naive(spec, q, k, v, [40]), atol=TOLERANCE, rtol=TOLERANCE)


@pytest.mark.parametrize(
    "spec",
    [
        AttentionSpec(num_heads=4, head_size=32),
        AttentionSpec(num_heads=4, head_size=32, causal=True),
        AttentionSpec(num_heads=4, head_size=32, sliding_window=(3, 3)),
        AttentionSpec(num_heads=4, head_size=24),  # not a multiple of 16: grouped SDPA
    ],
)
@pytest.mark.parametrize("enabled", ["1", "0"])
def test_sdpa_backend_dispatch_matches_naive(spec: AttentionSpec, enabled: str, monkeypatch) -> None:
    monkeypatch.setenv("WDE_VARLEN_ATTENTION", enabled)
    torch.manual_seed(2)
    seq_lens = [9, 40, 41, 2]
    q, k, v = torch.randn(3, sum(seq_lens), 4, spec.head_size).unbind(0)
    metadata = TorchSdpaBackend.build_metadata(seq_lens, torch.device("cpu"))
    assert (metadata.seq_starts is not None) == (enabled == "1")
    out = TorchSdpaBackend(spec).forward(q, k, v, metadata)
    torch.testing.assert_close(out, _naive(spec, q, k, v, seq_lens), atol=TOLERANCE, rtol=TOLERANCE)


def test_sdpa_backend_key_limits_keep_the_grouped_path() -> None:
    seq_lens, num_keys = [6, 10], [4, 10]
    metadata = TorchSdpaBackend.build_metadata(seq_lens, torch.device("cpu"), num_keys)
    assert metadata.seq_starts is None  # the kernel attends to every token
    q, k, v = torch.randn(3, 16, 2, 32).unbind(0)
    spec = AttentionSpec(num_heads=2, head_size=32)
    naive_metadata = NaiveBackend.build_metadata(seq_lens, torch.device("cpu"), num_keys)
    expected = NaiveBackend(spec).forward(q, k, v, naive_metadata)
    out = TorchSdpaBackend(spec).forward(q, k, v, metadata)
    torch.testing.assert_close(out, expected, atol=TOLERANCE, rtol=TOLERANCE)
