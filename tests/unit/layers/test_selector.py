"""The attention backend selector: explicit choice, platform order, and why each backend was passed over."""

from __future__ import annotations

import pytest
import torch

from wde.config import ATTENTION_BACKEND_NAMES
from wde.layers.attention.selector import BACKENDS, select_attention_backend
from wde.layers.attention.spec import AttentionSpec
from wde.platforms.cpu import CpuPlatform
from wde.platforms.cuda import CudaPlatform

SPECS = [AttentionSpec(num_heads=4, head_size=32)]


def test_cpu_auto_picks_sdpa_and_says_why_naive_was_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the varlen kernel switched off (tests/unit/layers/test_varlen_cpu_backend.py covers it on)."""
    monkeypatch.setenv("WDE_VARLEN_ATTENTION", "0")
    backend, skipped = select_attention_backend("auto", CpuPlatform(), torch.float32, SPECS)
    assert backend.name == "torch_sdpa"
    assert skipped == {
        "varlen_cpu": "switched off by WDE_VARLEN_ATTENTION=0",
        "naive": "available, but torch_sdpa comes first on cpu",
    }


def test_the_names_tuple_is_the_registry() -> None:
    assert tuple(BACKENDS) == ATTENTION_BACKEND_NAMES


def test_explicit_choice_and_aliases() -> None:
    assert select_attention_backend("naive", CpuPlatform(), torch.float32, SPECS)[0].name == "naive"
    assert select_attention_backend("sdpa", CpuPlatform(), torch.float32, SPECS)[0].name == "torch_sdpa"
    with pytest.raises(ValueError, match=r"cannot run here"):
        select_attention_backend("flash", CpuPlatform(), torch.float16, SPECS)
    with pytest.raises(ValueError, match="'magic' is not one of"):
        select_attention_backend("magic", CpuPlatform(), torch.float32, SPECS)


def test_flash_attn_reasons_on_a_cpu_platform() -> None:
    with pytest.raises(ValueError, match=r"cannot run here: does not run on cpu \(only cuda\)"):
        select_attention_backend("flash_attn", CpuPlatform(), torch.float16, SPECS)


def test_cuda_order_reports_a_reason_for_every_skipped_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CUDA platform with float32, flash-attn is skipped for its dtype (and xformers for its package when
    it is missing) before SDPA is chosen."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "xformers" else real_find_spec(name, *a)
    )
    backend, skipped = select_attention_backend("auto", CudaPlatform(), torch.float32, SPECS)
    assert backend.name == "torch_sdpa"
    assert skipped["flash_attn"] == "does not support dtype float32 (only float16, bfloat16)"
    assert skipped["xformers"] == "xformers is not installed: pip install 'wde[xformers]'"
    assert skipped["naive"] == "available, but torch_sdpa comes first on cuda"


def test_a_spec_no_backend_honours_is_named_with_the_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """xformers has no sliding windows: on CUDA with such a layer it is skipped, saying which layer."""
    import importlib.util

    from wde.layers.attention.backends.xformers import XFormersBackend

    monkeypatch.setattr(XFormersBackend, "is_available", classmethod(lambda cls, device, dtype: (True, "")))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "flash_attn" else real_find_spec(name, *a),
    )
    windowed = AttentionSpec(num_heads=4, head_size=32, sliding_window=(64, 64))
    with pytest.raises(
        ValueError, match=r"sliding-window layers are not wired for xformers.*window \(64, 64\)"
    ):
        select_attention_backend("xformers", CudaPlatform(), torch.float16, [*SPECS, windowed])


def test_hidden_query_expansion_skips_backends_that_attend_to_every_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ColBERT model whose queries carry unattended expansion tokens: on CUDA, flash-attn (which would come
    first) is passed over with the reason, and SDPA chosen."""
    from wde.layers.attention.backends.flash_attn import FlashAttnBackend

    monkeypatch.setattr(FlashAttnBackend, "is_available", classmethod(lambda cls, device, dtype: (True, "")))
    backend, skipped = select_attention_backend(
        "auto", CudaPlatform(), torch.float16, SPECS, needs_key_limits=True
    )
    assert backend.name in ("xformers", "torch_sdpa") and backend.supports_key_limits
    assert "hides its query expansion tokens" in skipped["flash_attn"]
    with pytest.raises(ValueError, match="hides its query expansion tokens"):
        select_attention_backend("flash_attn", CudaPlatform(), torch.float16, SPECS, needs_key_limits=True)
