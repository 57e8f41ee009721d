from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from wde.platforms.interface import Platform

if TYPE_CHECKING:
    from wde.worker.model_runner import ModelRunnerBase


class CpuPlatform(Platform):
    device_type = "cpu"
    attention_backend_order = ("torch_sdpa", "naive")
    supported_dtypes = ("float32", "bfloat16")
    # On a few cores a second thread only steals cycles from torch's intra-op threads: run inline.
    default_executor = "sync"
    # Batches of ~2k tokens keep the MLP activations cache-resident; 8k-token batches ran ~20% slower.
    default_max_num_batched_tokens = 2048

    def default_dtype(self, hf_config: dict[str, Any]) -> str:
        return "float32"  # bfloat16 is faster on AVX-512-bf16/AMX machines, but only on request

    def memory_info(self) -> tuple[int, int]:
        page_size = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page_size, os.sysconf("SC_PHYS_PAGES") * page_size

    def model_runner_cls(self) -> type[ModelRunnerBase]:
        from wde.worker.cpu_model_runner import CPUModelRunner

        return CPUModelRunner
