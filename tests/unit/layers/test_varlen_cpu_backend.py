"""The ``varlen_cpu`` attention backend: the CPU platform's first choice where it can run, and the selector's
reason where it cannot (no AVX2 / AVX-512F, no C compiler, switched off, a dtype or spec it does not honour:
float16, bfloat16 without AVX512-BF16; hidden query expansion tokens). Its forward through the backend
interface equals ``naive`` (max abs <= 1e-5, float32) on GQA, strided q / k / v and sequences of mixed
lengths."""

from __future__ import annotations

import platform
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from wde.layers.attention.backends import varlen_kernel
from wde.layers.attention.backends.naive import NaiveBackend
from wde.layers.attention.backends.varlen_cpu import VarlenCpuBackend
from wde.layers.attention.selector import select_attention_backend
from wde.layers.attention.spec import AttentionSpec
from wde.platforms.cpu import CpuPlatform

TOLERANCE = 1e-5
PLAIN = AttentionSpec(num_heads=4, head_size=32)
KERNEL_REASON = varlen_kernel.unavailable_reason()
needs_kernel = pytest.mark.skipif(bool(KERNEL_REASON), reason=f"no varlen kernel: {KERNEL_REASON}")


@pytest.fixture
def fresh_choice() -> Iterator[None]:
    varlen_kernel.clear_choice()
    yield
    varlen_kernel.clear_choice()


@needs_kernel
def test_cpu_auto_picks_varlen_cpu_first() -> None:
    backend, skipped = select_attention_backend("auto", CpuPlatform(), torch.float32, [PLAIN])
    assert backend is VarlenCpuBackend
    assert skipped == {
        "torch_sdpa": "available, but varlen_cpu comes first on cpu",
        "naive": "available, but varlen_cpu comes first on cpu",
    }
    assert (
        select_attention_backend("varlen-cpu", CpuPlatform(), torch.float32, [PLAIN])[0] is VarlenCpuBackend
    )


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (AttentionSpec(num_heads=4, head_size=32, causal=True), "no causal mask"),
        (AttentionSpec(num_heads=4, head_size=32, sliding_window=(64, 64)), "no sliding window"),
        (AttentionSpec(num_heads=4, head_size=36), "head size 36 is not a multiple of"),
        (AttentionSpec(num_heads=1, head_size=256), "head size 256 is not a multiple of"),
    ],
)
def test_specs_the_kernel_does_not_honour_are_named(spec: AttentionSpec, reason: str) -> None:
    supported, why = VarlenCpuBackend.supports(spec)
    if spec.head_size in (36, 256) and KERNEL_REASON:
        pytest.skip(f"head sizes are the chosen kernel's; none is chosen here: {KERNEL_REASON}")
    assert not supported and reason in why


@needs_kernel
def test_a_mixed_model_falls_back_to_sdpa_naming_the_layer() -> None:
    """ModernBERT-like: global and windowed layers; the kernel has no window, so torch_sdpa runs them all."""
    windowed = AttentionSpec(num_heads=4, head_size=32, sliding_window=(64, 64))
    backend, skipped = select_attention_backend("auto", CpuPlatform(), torch.float32, [PLAIN, windowed])
    assert backend.name == "torch_sdpa"
    assert skipped["varlen_cpu"].endswith("(a layer with 4 heads of 32, window (64, 64))")
    with pytest.raises(ValueError, match="'varlen_cpu' cannot run here: the kernel has no sliding window"):
        select_attention_backend("varlen_cpu", CpuPlatform(), torch.float32, [windowed])


def test_dtype_and_hidden_expansion_tokens_are_refused() -> None:
    _, skipped = select_attention_backend("auto", CpuPlatform(), torch.float16, [PLAIN])
    assert skipped["varlen_cpu"] == "does not support dtype float16 (only float32, bfloat16)"
    backend, skipped = select_attention_backend("auto", CpuPlatform(), torch.bfloat16, [PLAIN])
    if varlen_kernel.bf16_io_reason():  # a CPU without AVX512-BF16: no bfloat16 kernel
        assert skipped["varlen_cpu"].startswith("no bfloat16 kernel: ")
    else:
        assert backend.name == "varlen_cpu"
    _, skipped = select_attention_backend(
        "auto", CpuPlatform(), torch.float32, [PLAIN], needs_key_limits=True
    )
    assert "hides its query expansion tokens" in skipped["varlen_cpu"]
    with pytest.raises(ValueError, match="need --attention-backend torch_sdpa or naive"):
        VarlenCpuBackend.build_metadata([4, 6], torch.device("cpu"), num_keys=[2, 6])


def test_switched_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WDE_VARLEN_ATTENTION", "0")
    backend, skipped = select_attention_backend("auto", CpuPlatform(), torch.float32, [PLAIN])
    assert backend.name == "torch_sdpa"
    assert skipped["varlen_cpu"] == "switched off by WDE_VARLEN_ATTENTION=0"


def test_a_cpu_without_avx2_is_named(fresh_choice: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(varlen_kernel.ISA_ENV, raising=False)
    monkeypatch.setattr(varlen_kernel, "cpu_flags", lambda: frozenset({"sse4_2", "avx"}))
    _, skipped = select_attention_backend("auto", CpuPlatform(), torch.float32, [PLAIN])
    assert skipped["varlen_cpu"] == "this CPU has neither AVX-512F nor AVX2 + FMA"


def test_no_c_compiler_is_named(fresh_choice: None, monkeypatch: pytest.MonkeyPatch) -> None:
    if varlen_kernel.chosen_variant()[0] is None:
        pytest.skip(f"no kernel for this CPU, so no compiler is looked for: {KERNEL_REASON}")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(varlen_kernel.shutil, "which", lambda name: None)
    _, skipped = select_attention_backend("auto", CpuPlatform(), torch.float32, [PLAIN])
    assert skipped["varlen_cpu"] == "no C compiler to build the kernel (install gcc, or set CC)"


def test_a_compiler_that_fails_is_named(
    fresh_choice: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if varlen_kernel.chosen_variant()[0] is None:
        pytest.skip(f"no kernel for this CPU, so no compiler is looked for: {KERNEL_REASON}")
    monkeypatch.setenv("CC", "false")  # exits 1 without output
    monkeypatch.setenv("WDE_KERNEL_CACHE", str(tmp_path))
    ok, reason = VarlenCpuBackend.is_available("cpu", torch.float32)
    assert not ok and "kernel did not build with false" in reason


@pytest.mark.parametrize("isa", list(varlen_kernel.VARIANTS))
def test_every_variant_compiles(isa: str) -> None:
    """Both sources build on any x86 machine with a C compiler, whichever of them this CPU can run (into the
    kernel cache: a second run finds them there)."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None or platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("needs an x86 machine with a C compiler")
    library = varlen_kernel.build(compiler, varlen_kernel.VARIANTS[isa])
    assert library.is_file() and library.name.startswith(f"varlen_cpu_{isa}_")


@needs_kernel
def test_forward_matches_naive_with_gqa_and_strided_views() -> None:
    torch.manual_seed(4)
    seq_lens = [3, 33, 18, 64]
    spec = AttentionSpec(num_heads=8, head_size=64, num_kv_heads=2)
    qkv = torch.randn(sum(seq_lens), 12, 64)  # a fused projection: 8 query heads, 2 key, 2 value
    q, k, v = qkv[:, :8], qkv[:, 8:10], qkv[:, 10:]
    out = VarlenCpuBackend(spec).forward(
        q, k, v, VarlenCpuBackend.build_metadata(seq_lens, torch.device("cpu"))
    )
    expected = NaiveBackend(spec).forward(q, k, v, NaiveBackend.build_metadata(seq_lens, torch.device("cpu")))
    assert out.shape == (sum(seq_lens), 8, 64)
    assert (out - expected).abs().max().item() <= TOLERANCE
