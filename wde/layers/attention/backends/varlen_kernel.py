"""The CPU varlen attention kernels (``varlen_cpu_avx512.c``, ``varlen_cpu_avx2.c``): one is chosen by the CPU
found (AVX-512F -> the AVX-512 kernel, else AVX2 + FMA -> the AVX2 one; ``WDE_VARLEN_ISA=avx2`` or ``avx512``
forces one), built with the system C compiler at first use (the same toolchain ``torch.compile`` needs),
cached by source, compiler and flags under ``$WDE_KERNEL_CACHE`` (default ``~/.cache/wde/kernels``), and
called through ctypes on the tensors' memory. ``unavailable_reason()`` says why none can run here.

A layer that allows bf16 products (``AttentionSpec.bf16_products``: an int8 model's) runs
``varlen_cpu_avx512bf16.c`` instead where the CPU has AVX512-BF16 (and the AVX-512 kernel is the chosen one):
the same kernel with the scores' and the weighted values' products in bfloat16, float32 sums, 1.4-1.5x
faster at head size 32 (2 cores of an AVX-512 bf16 EPYC, 32 sequences of 160 tokens, 12 heads).
``WDE_VARLEN_BF16=0`` keeps such layers on the float32 kernel. The same source built with ``-DWDE_BF16_IO``
takes and gives bfloat16 tensors: a bfloat16 model's attention (``BF16_IO_VARIANT``; the switch is the same).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from wde.platforms.cpu_flags import cpu_flags

logger = logging.getLogger(__name__)

ISA_ENV = "WDE_VARLEN_ISA"  # avx512 | avx2: force one kernel (e.g. the AVX2 one on an AVX-512 machine)
BF16_ENV = "WDE_VARLEN_BF16"  # "0": layers that allow bf16 products run the float32 kernel
BASE_FLAGS = ("-O3", "-std=c11", "-fPIC", "-shared", "-fopenmp")


@dataclass(frozen=True)
class KernelVariant:
    isa: str
    source: str  # a file beside this module
    flags: tuple[str, ...]  # on top of BASE_FLAGS
    cpu_flags: tuple[str, ...]  # /proc/cpuinfo flags the kernel needs
    torch_levels: tuple[str, ...]  # torch.backends.cpu.get_cpu_capability() values that imply them
    head_size_multiple: int  # the vector width in floats
    max_head_size: int = 128  # the kernels keep a query block of at most 128 floats per row


VARIANTS: dict[str, KernelVariant] = {  # the CPU's best first
    "avx512": KernelVariant(
        "avx512",
        "varlen_cpu_avx512.c",
        ("-mavx512f", "-mavx512dq", "-mfma"),
        ("avx512f",),
        ("AVX512", "AMX"),
        head_size_multiple=16,
    ),
    "avx2": KernelVariant(
        "avx2", "varlen_cpu_avx2.c", ("-mavx2", "-mfma"), ("avx2", "fma"), ("AVX2", "AVX512", "AMX"), 8
    ),
}


# the kernel of the layers that allow bf16 products (in place of the AVX-512 one)
BF16_VARIANT = KernelVariant(
    "avx512bf16",
    "varlen_cpu_avx512bf16.c",
    ("-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512bf16", "-mfma"),
    ("avx512f", "avx512bw", "avx512_bf16"),
    ("AVX512", "AMX"),
    head_size_multiple=16,
)
# the same kernel with bfloat16 q, k, v and output (a bfloat16 model's layers)
BF16_IO_VARIANT = dataclasses.replace(
    BF16_VARIANT, isa="avx512bf16io", flags=(*BF16_VARIANT.flags, "-DWDE_BF16_IO")
)


def _cpu_runs(variant: KernelVariant) -> bool:
    """torch's own dispatch level agrees, and the CPU lists the flags (a hypervisor may hide some)."""
    level = torch.backends.cpu.get_cpu_capability()
    return level in variant.torch_levels and set(variant.cpu_flags) <= cpu_flags()


@functools.cache
def chosen_variant() -> tuple[KernelVariant | None, str]:
    """(the kernel this CPU runs, why not when None): the CPU's best, or the one WDE_VARLEN_ISA names."""
    forced = os.environ.get(ISA_ENV, "").strip().lower()
    if forced:
        if forced not in VARIANTS:
            return None, f"{ISA_ENV}={forced!r} is not one of {', '.join(VARIANTS)}"
        variant = VARIANTS[forced]
        if not _cpu_runs(variant):
            return None, f"{ISA_ENV}={forced} but this CPU lacks {'/'.join(variant.cpu_flags)}"
        return variant, ""
    for variant in VARIANTS.values():
        if _cpu_runs(variant):
            return variant, ""
    return None, "this CPU has neither AVX-512F nor AVX2 + FMA"


def _cache_dir() -> Path:
    return Path(os.environ.get("WDE_KERNEL_CACHE", Path.home() / ".cache" / "wde" / "kernels"))


def build(compiler: str, variant: KernelVariant) -> Path:
    """The variant's shared library, compiled unless the cache has it (any x86 CPU compiles every variant;
    running one needs its ISA)."""
    source_path = Path(__file__).with_name(variant.source)
    flags = [*BASE_FLAGS, *variant.flags]
    # the source and the headers beside it (varlen_cpu_avx512.h), so that an edit of either builds again
    sources = b"".join(path.read_bytes() for path in [source_path, *sorted(source_path.parent.glob("*.h"))])
    digest = hashlib.sha256(sources + " ".join([compiler, *flags]).encode()).hexdigest()[:16]
    target = _cache_dir() / f"varlen_cpu_{variant.isa}_{digest}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        subprocess.run(
            [compiler, *flags, str(source_path), "-o", str(built)], check=True, capture_output=True
        )
        os.replace(built, target)  # atomic: a concurrent build of the same source writes the same file
    return target


@functools.cache
def _load() -> tuple[ctypes.CDLL | None, str]:
    """The chosen float32 kernel (None and why not)."""
    variant, reason = chosen_variant()
    if variant is None:
        return None, reason
    return _load_variant(variant)


@functools.cache
def _load_bf16(bf16_io: bool = False) -> tuple[ctypes.CDLL | None, str]:
    """The bf16-products kernel, on float32 tensors or (``bf16_io``) on bfloat16 ones (None and why not)."""
    if os.environ.get(BF16_ENV, "1") == "0":
        return None, f"switched off by {BF16_ENV}=0"
    variant, reason = chosen_variant()
    if variant is None:
        return None, reason
    if variant.isa != "avx512":
        return None, f"the {variant.isa} kernel is the chosen one"
    if not _cpu_runs(BF16_VARIANT):
        return None, f"this CPU lacks {'/'.join(BF16_VARIANT.cpu_flags)}"
    return _load_variant(BF16_IO_VARIANT if bf16_io else BF16_VARIANT)


@functools.cache
def _load_variant(variant: KernelVariant) -> tuple[ctypes.CDLL | None, str]:
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        return None, "no C compiler to build the kernel (install gcc, or set CC)"
    try:
        library = ctypes.CDLL(str(build(compiler, variant)))
    except (OSError, subprocess.CalledProcessError) as e:
        stderr = (getattr(e, "stderr", b"") or b"").decode(errors="replace")[-500:]
        logger.warning("varlen CPU attention kernel (%s) not built: %s %s", variant.isa, e, stderr)
        return None, f"the {variant.isa} kernel did not build with {compiler}: {e}"
    function = library.wde_varlen_attention
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    # q k v out seq_starts, 11 sizes / strides, scale, order, threads, bias and its head / row strides
    function.argtypes = [ptr] * 5 + [i64] * 11 + [ctypes.c_float, ptr, ctypes.c_int, ptr, i64, i64]
    function.restype = None
    return library, ""


def clear_choice() -> None:
    """Forget the ISA choice and the loaded kernel (the next call reads WDE_VARLEN_ISA and the CPU again)."""
    chosen_variant.cache_clear()
    _load.cache_clear()
    _load_bf16.cache_clear()
    _load_variant.cache_clear()


def unavailable_reason() -> str:
    """Why no kernel runs here ("" when one is built, or cached, for this CPU). Builds it on first call."""
    return _load()[1]


def bf16_products_reason() -> str:
    """Why layers that allow bf16 products run the float32 kernel here ("" when the bf16 one runs them)."""
    return _load_bf16()[1]


def bf16_io_reason() -> str:
    """Why no kernel takes bfloat16 tensors here ("" when one does)."""
    return _load_bf16(bf16_io=True)[1]


def head_size_reason(head_size: int) -> str:
    """Why the chosen kernel cannot take this head size ("" when it can)."""
    variant, _ = chosen_variant()
    if variant is None:
        return ""
    if head_size % variant.head_size_multiple or head_size > variant.max_head_size:
        return (
            f"head size {head_size} is not a multiple of {variant.head_size_multiple} up to "
            f"{variant.max_head_size} (the {variant.isa} kernel's vectors)"
        )
    return ""


def work_order(seq_lens: list[int]) -> torch.Tensor:
    """Sequence indices, longest first: the kernel's dynamic schedule then balances its threads."""
    order = np.argsort(-np.asarray(seq_lens, dtype=np.int64), kind="stable")  # ties: batch order
    return torch.from_numpy(order)


def varlen_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    seq_starts: torch.Tensor,
    order: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None = None,
    bf16_products: bool = False,
) -> torch.Tensor:
    """query [num_tokens, num_heads, head_size], key / value [num_tokens, num_kv_heads, head_size] (float32 or
    bfloat16 on the CPU, any row and head strides, contiguous head vectors), ``seq_starts`` [num_seqs + 1]
    int64 CPU, ``order`` from ``work_order(seq_lens)`` -> [num_tokens, num_heads, head_size] of the query's
    dtype. ``bias``: None, or [num_heads, L, L] float32 (L >= the longest sequence, contiguous rows) added to
    each sequence's scores by position within it (MPNet's relative position bias). ``bf16_products``: the
    bf16-products kernel on float32 tensors (``bf16_products_reason()`` says whether it runs here);
    bfloat16 tensors always take it (``bf16_io_reason()``)."""
    if query.dtype not in (torch.float32, torch.bfloat16) or {key.dtype, value.dtype} != {query.dtype}:
        dtypes = f"{query.dtype}, {key.dtype}, {value.dtype}"
        raise ValueError(f"q, k, v must be all float32 or all bfloat16; got {dtypes}")
    bf16_io = query.dtype == torch.bfloat16
    library, reason = _load_bf16(bf16_io) if bf16_products or bf16_io else _load()
    if library is None:
        raise RuntimeError(f"the varlen CPU attention kernel cannot run here: {reason}")
    num_tokens, num_heads, head_size = query.shape
    out = torch.empty(num_tokens, num_heads, head_size, dtype=query.dtype)
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
        *_bias_args(bias, num_heads, seq_starts),
    )
    return out


def _bias_args(bias: torch.Tensor | None, num_heads: int, seq_starts: torch.Tensor) -> tuple[int, int, int]:
    """(pointer, head stride, row stride) of ``bias`` for the kernel; (0, 0, 0) without one."""
    if bias is None:
        return 0, 0, 0
    max_len = int((seq_starts[1:] - seq_starts[:-1]).max()) if seq_starts.numel() > 1 else 0
    if (
        bias.dtype != torch.float32
        or bias.dim() != 3
        or bias.shape[0] != num_heads
        or min(bias.shape[1:]) < max_len
        or bias.stride(2) != 1
    ):
        raise ValueError(
            f"bias must be float32 [num_heads={num_heads}, L, L] with L >= {max_len} and contiguous rows; "
            f"got {bias.dtype} {list(bias.shape)} strides {bias.stride()}"
        )
    return bias.data_ptr(), bias.stride(0), bias.stride(1)
