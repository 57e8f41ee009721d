from __future__ import annotations

import os
from typing import Any

from wde.platforms.cpu_flags import cpu_flags
from wde.platforms.interface import Platform

# /proc/cpuinfo flags of CPUs whose matmuls take bfloat16 natively (Cooper Lake / Zen 4 and later: AVX-512
# BF16 dot products; Sapphire Rapids and later: AMX tiles); without them torch emulates bfloat16, ~7x slower
# than float32 (2 cores of an AVX2 EPYC, docs/benchmarks.md)
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


class CpuPlatform(Platform):
    device_type = "cpu"
    # wde's varlen kernel where the CPU (AVX2 / AVX-512F), a C compiler and every layer's spec allow it
    attention_backend_order = ("varlen_cpu", "torch_sdpa", "naive")
    supported_dtypes = ("float32", "bfloat16")
    # On a few cores a second thread only steals cycles from torch's intra-op threads: run inline.
    default_executor = "sync"
    # Batches of ~2k tokens keep the MLP activations cache-resident; 8k-token batches ran ~20% slower.
    default_max_num_batched_tokens = 2048
    # Memory is rarely the limit on CPU; bigger batches only spill the caches.
    max_auto_num_batched_tokens = 2048

    def default_dtype(self, hf_config: dict[str, Any]) -> str:
        return "float32"  # the reference's answers; bfloat16 is "fast" where the CPU computes it natively

    def fast_dtype(self, hf_config: dict[str, Any]) -> tuple[str, str]:
        native = [flag for flag in NATIVE_BF16_FLAGS if flag in cpu_flags()]
        if native:
            return "bfloat16", f"this CPU computes bfloat16 natively ({', '.join(native)})"
        return "float32", (
            f"this CPU has no native bfloat16 (none of {', '.join(NATIVE_BF16_FLAGS)}): bfloat16 would be "
            "emulated, several times slower than float32"
        )

    def memory_info(self) -> tuple[int, int]:
        page_size = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page_size, os.sysconf("SC_PHYS_PAGES") * page_size

    def memory_in_use_bytes(self) -> int:
        return _proc_status_bytes("VmRSS")

    def reset_peak_memory(self) -> None:
        try:  # Linux: "5" resets the peak resident set size (VmHWM)
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass  # the peak then counts from process start: an over-estimate, never an under-estimate

    def peak_memory_bytes(self) -> int:
        return _proc_status_bytes("VmHWM")


def _proc_status_bytes(field: str) -> int:
    """A ``kB`` field of /proc/self/status (VmRSS, VmHWM) in bytes; 0 where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
