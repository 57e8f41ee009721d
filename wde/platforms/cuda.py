from __future__ import annotations

from typing import Any

from wde.platforms.interface import Platform


class CudaPlatform(Platform):
    device_type = "cuda"
    # flash-attn (an extra) first; then torch's own varlen FlashAttention-2 (torch >= 2.9, no extra package),
    # which also allows CUDA graphs; xformers pads nothing either but has no graphs here
    attention_backend_order = ("flash_attn", "torch_varlen", "xformers", "torch_sdpa", "naive")
    supported_dtypes = ("float32", "bfloat16", "float16")
    # Kernels run asynchronously: the host schedules and tokenizes batch N+1 while N runs.
    default_executor = "async"
    default_max_num_batched_tokens = None  # "auto": the profile run sizes it to the memory share
    max_auto_num_batched_tokens = 65536

    def default_dtype(self, hf_config: dict[str, Any]) -> str:
        # Like vLLM: a float32 checkpoint runs in float16 on GPU; a bfloat16 one stays bfloat16.
        return "bfloat16" if hf_config.get("torch_dtype", hf_config.get("dtype")) == "bfloat16" else "float16"

    def memory_info(self) -> tuple[int, int]:
        import torch

        return torch.cuda.mem_get_info()

    def memory_in_use_bytes(self) -> int:
        import torch

        return torch.cuda.memory_allocated()

    def reset_peak_memory(self) -> None:
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def peak_memory_bytes(self) -> int:
        import torch

        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
