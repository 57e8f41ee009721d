"""``dtype="fast"`` (issue 26): bfloat16 on CPUs whose matmuls take it natively (AVX-512-BF16, AMX),
float32 on the others (where torch emulates bfloat16, several times slower), float32 with int8
quantization, and the default dtype on CUDA. The CPU is chosen by its /proc/cpuinfo flags, injected here."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from tests.tiny_models import save_tiny_bert
from wde import LLM
from wde.config import ModelConfig
from wde.engine_args import EngineArgs
from wde.platforms import cpu
from wde.platforms.cpu import CpuPlatform
from wde.platforms.cuda import CudaPlatform

AVX2_EPYC = frozenset({"avx", "avx2", "fma", "f16c"})
ZEN4 = AVX2_EPYC | {"avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"}
SAPPHIRE_RAPIDS = AVX2_EPYC | {"avx512f", "amx_tile", "amx_bf16", "amx_int8"}


def on_cpu_with(monkeypatch: pytest.MonkeyPatch, flags: frozenset[str]) -> None:
    monkeypatch.setattr(cpu, "cpu_flags", lambda: flags)


@pytest.mark.parametrize(("flags", "native"), [(ZEN4, "avx512_bf16"), (SAPPHIRE_RAPIDS, "amx_bf16")])
def test_bfloat16_where_the_cpu_computes_it(
    monkeypatch: pytest.MonkeyPatch, flags: frozenset[str], native: str
) -> None:
    on_cpu_with(monkeypatch, flags)
    dtype, why = CpuPlatform().fast_dtype({})
    assert dtype == "bfloat16"
    assert native in why


def test_float32_on_a_cpu_that_would_emulate_bfloat16(monkeypatch: pytest.MonkeyPatch) -> None:
    on_cpu_with(monkeypatch, AVX2_EPYC | {"avx512f"})  # AVX-512 without its BF16 extension
    dtype, why = CpuPlatform().fast_dtype({})
    assert dtype == "float32"
    assert "avx512_bf16" in why and "emulated" in why


def test_cuda_fast_is_its_default() -> None:
    platform = CudaPlatform()
    assert platform.fast_dtype({"torch_dtype": "float32"})[0] == "float16"
    assert platform.fast_dtype({"torch_dtype": "bfloat16"})[0] == "bfloat16"


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("fast_dtype") / "bert")


def resolved_dtype(model: Path, **kwargs: object) -> str:
    config = EngineArgs(model=str(model), device="cpu", **kwargs).create_engine_config()  # type: ignore[arg-type]
    return config.model_config.dtype


def test_engine_args_resolve_fast_by_the_cpu_and_log_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tiny_bert: Path
) -> None:
    on_cpu_with(monkeypatch, ZEN4)
    with caplog.at_level(logging.INFO, logger="wde.engine_args"):
        assert resolved_dtype(tiny_bert, dtype="fast") == "bfloat16"
    assert "dtype fast -> bfloat16: this CPU computes bfloat16 natively (avx512_bf16)" in caplog.text
    assert resolved_dtype(tiny_bert, dtype="auto") == "float32"  # auto keeps the reference's answers
    on_cpu_with(monkeypatch, AVX2_EPYC)
    assert resolved_dtype(tiny_bert, dtype="fast") == "float32"


def test_fast_with_int8_is_float32(monkeypatch: pytest.MonkeyPatch, tiny_bert: Path) -> None:
    on_cpu_with(monkeypatch, SAPPHIRE_RAPIDS)
    assert resolved_dtype(tiny_bert, dtype="fast", quantization="int8") == "float32"


def test_an_unresolved_dtype_is_refused_by_the_model_config(tiny_bert: Path) -> None:
    config = EngineArgs(model=str(tiny_bert), device="cpu").create_engine_config()
    for name in ("auto", "fast"):
        model_config = ModelConfig(**{**vars(config.model_config), "dtype": name})
        with pytest.raises(ValueError, match="after resolving 'auto' / 'fast'"):
            model_config.verify()


def test_fast_runs_bfloat16_close_to_float32(monkeypatch: pytest.MonkeyPatch, tiny_bert: Path) -> None:
    """Where "fast" picks bfloat16 the model runs in it (emulated on this CPU: the answers, not the speed);
    tolerance: cosine >= 0.999 to float32 on a random tiny BERT (the bundled MiniLM measured 0.99994)."""
    texts = ["a short query", "a somewhat longer document about package descriptions and their words"]
    reference = np.stack([output.embedding for output in LLM(str(tiny_bert), dtype="float32").encode(texts)])
    on_cpu_with(monkeypatch, ZEN4)
    fast = LLM(str(tiny_bert), dtype="fast")
    assert fast.engine.model_config.dtype == "bfloat16"
    embeddings = np.stack([output.embedding for output in fast.encode(texts)])
    cosine = (
        (embeddings * reference).sum(1)
        / np.linalg.norm(embeddings, axis=1)
        / np.linalg.norm(reference, axis=1)
    )
    assert cosine.min() >= 0.999
