"""torch_varlen (torch's own varlen FlashAttention-2) on a CPU machine: the reasons it refuses, its place in
the CUDA order (first when flash-attn is missing), and its call wiring, run on meta tensors through torch's
fake kernel (argument names and shapes as the installed torch takes them; the numbers are tests/gpu's)."""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Iterator

import pytest
import torch

from wde.layers.attention.backend import AttentionBackend
from wde.layers.attention.backends import torch_varlen
from wde.layers.attention.backends.torch_varlen import TorchVarlenBackend
from wde.layers.attention.selector import select_attention_backend
from wde.layers.attention.spec import AttentionSpec
from wde.platforms.cpu import CpuPlatform
from wde.platforms.cuda import CudaPlatform

SPECS = [AttentionSpec(num_heads=4, head_size=32)]
try:
    from torch.nn.attention.varlen import varlen_attn as INSTALLED_VARLEN_ATTN
except ImportError:  # torch < 2.9: the wiring tests skip
    INSTALLED_VARLEN_ATTN = None


@pytest.fixture
def pretend_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA machine as torch_varlen sees it: a device of compute capability 9.0, FlashAttention built in,
    and no flash-attn / xformers package."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.backends.cuda, "is_flash_attention_available", lambda: True)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("flash_attn", "xformers") else real_find_spec(name, *a),
    )


def with_parameters(monkeypatch: pytest.MonkeyPatch, parameters: frozenset[str] | None) -> None:
    monkeypatch.setattr(torch_varlen, "varlen_parameters", lambda: parameters)


def test_refusal_reasons_without_cuda() -> None:
    assert TorchVarlenBackend.is_available("cpu", torch.float16) == (
        False,
        "does not run on cpu (only cuda)",
    )
    available, reason = TorchVarlenBackend.is_available("cuda", torch.float32)
    assert not available
    assert (
        reason == "does not support dtype float32 (only float16, bfloat16); pass --dtype float16 or bfloat16"
    )
    if not torch.cuda.is_available():
        assert TorchVarlenBackend.is_available("cuda", torch.float16) == (False, "torch sees no CUDA device")


def test_refusal_reasons_for_torch_build_and_gpu(pretend_cuda: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert TorchVarlenBackend.is_available("cuda", torch.bfloat16) == (True, "")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    assert TorchVarlenBackend.is_available("cuda", torch.float16) == (
        False,
        "needs compute capability >= 8.0 (Ampere), this GPU has 7.5",
    )
    monkeypatch.setattr(torch.backends.cuda, "is_flash_attention_available", lambda: False)
    assert "has no FlashAttention kernels" in TorchVarlenBackend.is_available("cuda", torch.float16)[1]
    with_parameters(monkeypatch, None)
    available, reason = TorchVarlenBackend.is_available("cuda", torch.float16)
    assert not available and reason.startswith("needs torch >= 2.9 (torch.nn.attention.varlen)")


def test_cuda_prefers_it_when_flash_attn_is_missing(pretend_cuda: None) -> None:
    backend, skipped = select_attention_backend("auto", CudaPlatform(), torch.float16, SPECS)
    assert backend is TorchVarlenBackend
    assert skipped["flash_attn"] == "flash-attn is not installed: pip install 'wde[flash]'"
    assert skipped["torch_sdpa"] == "available, but torch_varlen comes first on cuda"
    assert select_attention_backend("varlen", CudaPlatform(), torch.float16, SPECS)[0] is TorchVarlenBackend


def test_cuda_float32_falls_to_sdpa_saying_why(pretend_cuda: None) -> None:
    backend, skipped = select_attention_backend("auto", CudaPlatform(), torch.float32, SPECS)
    assert backend.name == "torch_sdpa"
    assert skipped["torch_varlen"].startswith("does not support dtype float32")


def test_cpu_platform_never_lists_it() -> None:
    backend, skipped = select_attention_backend("auto", CpuPlatform(), torch.float32, SPECS)
    assert "torch_varlen" not in skipped and backend is not TorchVarlenBackend
    with pytest.raises(ValueError, match=r"'torch_varlen' cannot run here: does not run on cpu"):
        select_attention_backend("torch_varlen", CpuPlatform(), torch.float16, SPECS)


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (
            AttentionSpec(num_heads=12, head_size=64, position_bias=True),
            "varlen_attn takes no additive position bias (MPNet); use torch_sdpa",
        ),
        (AttentionSpec(num_heads=4, head_size=36), "head size 36 is not a multiple of 8 up to 256"),
        (AttentionSpec(num_heads=2, head_size=512), "head size 512 is not a multiple of 8 up to 256"),
    ],
)
def test_layers_it_refuses(spec: AttentionSpec, reason: str, pretend_cuda: None) -> None:
    assert TorchVarlenBackend.supports(spec) == (False, reason)
    backend, skipped = select_attention_backend("auto", CudaPlatform(), torch.float16, [*SPECS, spec])
    assert backend.name == "torch_sdpa"
    assert skipped["torch_varlen"] == f"{reason} (a layer with {spec.describe()})"


def test_sliding_windows_need_a_torch_with_window_size(monkeypatch: pytest.MonkeyPatch) -> None:
    windowed = AttentionSpec(num_heads=4, head_size=32, sliding_window=(64, 64))
    with_parameters(monkeypatch, frozenset(inspect.signature(varlen_attn_2_11).parameters))
    assert TorchVarlenBackend.supports(windowed) == (True, "")
    with_parameters(monkeypatch, frozenset(inspect.signature(varlen_attn_2_9).parameters))
    supported, reason = TorchVarlenBackend.supports(windowed)
    assert not supported and "has no window_size: sliding windows need torch >= 2.11" in reason
    assert TorchVarlenBackend.supports(AttentionSpec(num_heads=4, head_size=32, causal=True)) == (True, "")


def test_hidden_query_expansion_passes_it_over(pretend_cuda: None) -> None:
    backend, skipped = select_attention_backend(
        "auto", CudaPlatform(), torch.float16, SPECS, needs_key_limits=True
    )
    assert backend.name == "torch_sdpa"
    assert "hides its query expansion tokens" in skipped["torch_varlen"]


def varlen_attn_2_11(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    *,
    return_aux: object = None,
    scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
) -> torch.Tensor:
    """torch 2.11's signature (the GPU image's torch): no enable_gqa, so k / v must come with every head."""
    assert key.shape[1] == value.shape[1] == query.shape[1]
    return INSTALLED_VARLEN_ATTN(
        query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale=scale, window_size=window_size
    )


def varlen_attn_2_9(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    is_causal: bool = False,
    return_aux: object = None,
) -> torch.Tensor:
    """torch 2.9's signature: is_causal, no scale, no window."""
    assert key.shape[1] == value.shape[1] == query.shape[1]
    return INSTALLED_VARLEN_ATTN(
        query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, window_size=(-1, 0) if is_causal else (-1, -1)
    )


@pytest.fixture
def torch_signature(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The installed varlen_attn, or one with an older torch's signature in its place (delegating to it)."""
    if torch_varlen.varlen_parameters() is None:
        pytest.skip(f"torch {torch.__version__} has no torch.nn.attention.varlen")
    from torch.nn.attention import varlen

    old = {"2.11": varlen_attn_2_11, "2.9": varlen_attn_2_9}.get(request.param)
    if old is not None:
        monkeypatch.setattr(varlen, "varlen_attn", old)
    torch_varlen.varlen_parameters.cache_clear()
    yield request.param
    torch_varlen.varlen_parameters.cache_clear()


@pytest.mark.parametrize("torch_signature", ["installed", "2.11", "2.9"], indirect=True)
@pytest.mark.parametrize(
    "spec",
    [
        AttentionSpec(num_heads=12, head_size=64),
        AttentionSpec(num_heads=8, head_size=64, num_kv_heads=2, causal=True, scale=0.1),
        AttentionSpec(num_heads=8, head_size=128, sliding_window=(16, 16)),
    ],
    ids=["plain", "gqa-causal-scaled", "window"],
)
def test_call_wiring_on_meta_tensors(spec: AttentionSpec, torch_signature: str) -> None:
    """The keywords the backend builds are ones this torch's varlen_attn takes (its fake kernel runs on meta
    tensors), also with an older torch's signature: then fewer keywords, grouped k / v repeated, the query
    pre-scaled."""
    if not TorchVarlenBackend.supports(spec)[0]:
        assert torch_signature == "2.9" and spec.sliding_window is not None
        return
    backend = TorchVarlenBackend(spec)
    metadata = AttentionBackend.build_metadata([5, 17, 1], torch.device("cpu"))
    metadata.cu_seqlens = metadata.cu_seqlens.to("meta")
    query = torch.empty(23, spec.num_heads, spec.head_size, dtype=torch.float16, device="meta")
    key = torch.empty(23, spec.num_kv_heads, spec.head_size, dtype=torch.float16, device="meta")
    output = backend.forward(query, key, key, metadata)
    assert output.shape == (23, spec.num_heads, spec.head_size) and output.dtype == torch.float16
    if torch_signature == "2.9":
        assert backend._kwargs == ({"is_causal": True} if spec.causal else {})
        assert backend._query_scale == pytest.approx(spec.scale * spec.head_size**0.5)
    elif spec.causal:
        assert backend._kwargs["window_size"] == (-1, 0)  # a tuple: varlen_attn compares it to (-1, 0)
