"""What differs between devices, decided in one place: default dtype, backend order, memory (plain values and
queries; the runner class of a device is the worker's table, wde/worker/runners.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar


class Platform(ABC):
    device_type: ClassVar[str]
    # Attention backends in order of preference when the user asks for "auto".
    attention_backend_order: ClassVar[tuple[str, ...]]
    supported_dtypes: ClassVar[tuple[str, ...]]
    # Defaults for knobs left at "auto" / None (see EngineArgs).
    default_executor: ClassVar[str]
    default_max_num_batched_tokens: ClassVar[int | None]  # None: "auto" (profiled)

    @abstractmethod
    def default_dtype(self, hf_config: dict[str, Any]) -> str:
        """The dtype name that "auto" resolves to for this model on this device."""

    def fast_dtype(self, hf_config: dict[str, Any]) -> tuple[str, str]:
        """(the dtype name "fast" resolves to, why): the fastest dtype this device computes natively whose
        embeddings stay within ~1e-4 cosine of float32's; by default what "auto" picks."""
        return self.default_dtype(hf_config), "the device's default dtype"

    # Cap on what max_num_batched_tokens="auto" may pick.
    max_auto_num_batched_tokens: ClassVar[int]

    @abstractmethod
    def memory_info(self) -> tuple[int, int]:
        """(free_bytes, total_bytes) of the memory the model's activations live in."""

    @abstractmethod
    def memory_in_use_bytes(self) -> int:
        """Memory this process holds now (device allocations, or resident set on CPU)."""

    @abstractmethod
    def reset_peak_memory(self) -> None:
        """Start a new peak measurement."""

    @abstractmethod
    def peak_memory_bytes(self) -> int:
        """Highest memory_in_use_bytes since reset_peak_memory."""
