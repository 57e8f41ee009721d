"""The CPU varlen attention kernel (``varlen_cpu.c``): built with the system C compiler at first use (the
same toolchain ``torch.compile`` needs), cached by source and flags under ``$WDE_KERNEL_CACHE`` (default
``~/.cache/wde/kernels``), called through ctypes on the tensors' memory. Used where the CPU has AVX-512F,
the dtype is float32 and the layer's spec is plain (bidirectional, no window, no position bias, every token
a key); anything else, or a failed build, keeps the grouped SDPA path (``available()`` says which).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("varlen_cpu_avx512.c")
FLAGS = ["-O3", "-std=c11", "-fPIC", "-shared", "-fopenmp", "-mavx512f", "-mavx512dq", "-mfma"]
MAX_HEAD_SIZE = 128  # the kernel keeps head_size / 16 accumulators of 16 floats


def _cpu_has_avx512f() -> bool:
    if torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AMX"):  # torch's own dispatch level
        return False
    try:
        return " avx512f " in f" {Path('/proc/cpuinfo').read_text()} ".replace("\n", " ")
    except OSError:
        return False


def _cache_dir() -> Path:
    return Path(os.environ.get("WDE_KERNEL_CACHE", Path.home() / ".cache" / "wde" / "kernels"))


def _build(compiler: str) -> Path:
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + " ".join([compiler, *FLAGS]).encode()).hexdigest()[:16]
    target = _cache_dir() / f"varlen_cpu_{digest}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(built)], check=True, capture_output=True)
        os.replace(built, target)  # atomic: a concurrent build of the same source writes the same file
    return target


@functools.cache
def _library() -> ctypes.CDLL | None:
    if not _cpu_has_avx512f():
        return None
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        logger.info("varlen CPU attention kernel not built: no C compiler; attention runs grouped SDPA")
        return None
    try:
        library = ctypes.CDLL(str(_build(compiler)))
    except (OSError, subprocess.CalledProcessError) as e:
        stderr = getattr(e, "stderr", b"") or b""
        logger.warning(
            "varlen CPU attention kernel not built (%s %s); attention runs grouped SDPA", e, stderr[-500:]
        )
        return None
    function = library.wde_varlen_attention
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    function.argtypes = [ptr, ptr, ptr, ptr, ptr, *[i64] * 11, ctypes.c_float, ptr, ctypes.c_int]
    function.restype = None
    return library


def available() -> bool:
    """The kernel is built (or cached) and this CPU runs it."""
    return _library() is not None


def supports(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """These tensors can go to the kernel as they are: CPU float32, contiguous head vectors of a size it
    handles."""
    head_size = query.shape[-1]
    return (
        head_size % 16 == 0
        and head_size <= MAX_HEAD_SIZE
        and all(
            t.device.type == "cpu" and t.dtype == torch.float32 and t.stride(-1) == 1
            for t in (query, key, value)
        )
    )


def work_order(seq_lens: list[int]) -> torch.Tensor:
    """Sequence indices, longest first: the kernel's dynamic schedule then balances its threads."""
    return torch.tensor(sorted(range(len(seq_lens)), key=lambda s: -seq_lens[s]), dtype=torch.int64)


def varlen_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    seq_starts: torch.Tensor,
    order: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """query [num_tokens, num_heads, head_size], key / value [num_tokens, num_kv_heads, head_size] (any row
    and head strides, contiguous head vectors), ``seq_starts`` [num_seqs + 1] int64 CPU, ``order`` from
    ``work_order(seq_lens)`` -> [num_tokens, num_heads, head_size] float32."""
    library = _library()
    assert library is not None, "varlen_attention called where available() is False"
    num_tokens, num_heads, head_size = query.shape
    out = torch.empty(num_tokens, num_heads, head_size, dtype=torch.float32)
    library.wde_varlen_attention(
        query.data_ptr(),
        key.data_ptr(),
        value.data_ptr(),
        out.data_ptr(),
        seq_starts.data_ptr(),
        seq_starts.numel() - 1,
        num_heads,
        key.shape[1],
        head_size,
        query.stride(0),
        query.stride(1),
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        num_heads * head_size,
        scale,
        order.data_ptr(),
        torch.get_num_threads(),
    )
    return out
