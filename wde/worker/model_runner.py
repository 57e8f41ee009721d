"""All model-running logic; device subclasses override only the named hooks:
``_cache_device_properties``, ``_prepare_weights``, ``load_model``, ``profile_run``, ``capture_model``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from wde.config import EngineConfig
from wde.layers.attention.backend import AttentionBackend
from wde.layers.attention.selector import select_attention_backend
from wde.layers.attention.spec import AttentionSpec
from wde.layers.forward_context import set_forward_context
from wde.layers.pooler.poolers import POOLERS, Pooler
from wde.models.interface import WdeModel
from wde.platforms import Platform, get_platform
from wde.request import Request
from wde.worker.cuda_graphs import CudaGraphManager
from wde.worker.input_batch import InputBatch
from wde.worker.memory_budget import ChosenBudget, MemoryProfile, choose_token_budget
from wde.worker.model_loader import load_model

logger = logging.getLogger(__name__)

# With max_num_batched_tokens="auto", the profile batch has this many tokens (capped by the platform's
# auto cap); activation memory per token is then extrapolated to the memory share.
AUTO_BUDGET_PROBE_TOKENS = 8192

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelRunnerBase:
    def __init__(self, engine_config: EngineConfig, platform: Platform | None = None) -> None:
        self.engine_config = engine_config
        self.model_config = engine_config.model_config
        self.platform = platform or get_platform(engine_config.device_config.device)
        self.device = torch.device(self.platform.device_type)
        self.dtype = TORCH_DTYPES[self.model_config.dtype]
        self.device_properties: dict[str, Any] = {}
        self._cache_device_properties()
        # The attention backend class is chosen at load, from the specs of the model's layers.
        self.attn_backend_cls: type[AttentionBackend] | None = None
        self.skipped_backends: dict[str, str] = {}
        self.model: WdeModel | None = None
        self.pooler: Pooler | None = None
        self.weight_bytes = 0
        self.memory_profile: MemoryProfile | None = None
        self.budget: ChosenBudget | None = None  # the token budget, chosen by initialize()
        # CUDA graphs (set by capture_model on devices that have them)
        self.cuda_graphs: CudaGraphManager | None = None
        self.graph_capturer: Any = None
        self.last_device_seconds = 0.0  # the device time of the last batch (CUDA events; 0.0 on CPU)

    # ---- device hooks -----------------------------------------------------------------------------
    def _cache_device_properties(self) -> None:
        """Read once at init what the device is (name, cores, memory); subclasses fill it in."""

    def _prepare_weights(self) -> None:
        """After loading, for a model run eagerly: lay its weights out as this device runs them fastest."""

    def load_model(self) -> None:
        start = time.perf_counter()
        self.model = load_model(self.model_config, self._choose_backend, self.device, self.dtype)
        if self.engine_config.device_config.compile_model:
            if not self.model.supports_compile_blocks:
                raise ValueError(
                    f"compile_model is not supported for {self.model_config.architecture}; "
                    "leave --compile-model off"
                )
            self.model.compile_blocks()  # compiled on the first batches (the profile run warms it up)
        elif self.model_config.quantization == "int8" and self.model.supports_compile_blocks:
            # int8 blocks gain most when the activation is fused with the next layer's quantization
            self.model.compile_blocks()
        else:
            self._prepare_weights()
        # weights: parameters, and the buffers that quantized layers keep their weights in
        tensors = [*self.model.parameters(), *self.model.buffers()]
        num_params = sum(t.numel() for t in tensors)
        self.weight_bytes = sum(t.numel() * t.element_size() for t in tensors)
        logger.info(
            "loaded %s (%s, %.1fM params) in %.2fs on %s in %s%s, attention backend %s",
            self.model_config.architecture,
            self.model_config.model,
            num_params / 1e6,
            time.perf_counter() - start,
            self.device,
            self.model_config.dtype,
            f" + {self.model_config.quantization}" if self.model_config.quantization else "",
            self.backend.name,
        )

    @property
    def backend(self) -> type[AttentionBackend]:
        """The attention backend class ``load_model`` chose."""
        if self.attn_backend_cls is None:
            raise RuntimeError("call load_model() first: it chooses the attention backend")
        return self.attn_backend_cls

    def _choose_backend(self, specs: list[AttentionSpec]) -> type[AttentionBackend]:
        name = self.engine_config.device_config.attention_backend
        multi_vector = self.engine_config.model_config.multi_vector
        needs_key_limits = multi_vector is not None and multi_vector.hides_expansion_tokens
        self.attn_backend_cls, self.skipped_backends = select_attention_backend(
            name, self.platform, self.dtype, specs, needs_key_limits
        )
        return self.attn_backend_cls

    def profile_run(self) -> ChosenBudget:
        """Run one worst-case batch (max-length sequences filling the budget) and measure its peak memory;
        returns the configured budget, or with an "auto" one the largest budget that fits the memory
        share."""
        scheduler_config = self.engine_config.scheduler_config
        max_model_len = self.model_config.max_model_len
        num_tokens = scheduler_config.max_num_batched_tokens or max(
            min(AUTO_BUDGET_PROBE_TOKENS, self.platform.max_auto_num_batched_tokens), max_model_len
        )
        num_seqs = min(scheduler_config.max_num_seqs, max(1, num_tokens // max_model_len))
        # 1. measure
        self.platform.reset_peak_memory()
        baseline = self.platform.memory_in_use_bytes()
        self.execute_model(self.prepare_inputs(self._dummy_requests(num_seqs, max_model_len)))
        num_profile_tokens = num_seqs * max_model_len
        measured = self.platform.peak_memory_bytes() - baseline
        self.memory_profile = MemoryProfile(
            total_bytes=self.platform.memory_info()[1],
            weight_bytes=self.weight_bytes,
            # A process that already ran bigger batches reuses freed memory (CPU RSS does not grow), so the
            # measurement is floored by what the layers must hold at once.
            peak_activation_bytes=max(measured, self._min_activation_bytes(num_profile_tokens)),
            num_profile_tokens=num_profile_tokens,
        )
        logger.info(
            "profile run: %d x %d tokens, peak activation memory %.1f MiB",
            num_seqs,
            max_model_len,
            self.memory_profile.peak_activation_bytes / 2**20,
        )
        # 2. size the budget when asked to
        configured = self._configured_budget()
        if configured is not None:
            return configured
        budget = choose_token_budget(
            self.memory_profile,
            self.engine_config.device_config.gpu_memory_utilization,
            max_model_len,
            self.platform.max_auto_num_batched_tokens,
        )
        logger.info("max_num_batched_tokens=auto -> %s", budget.reason)
        return budget

    def _configured_budget(self) -> ChosenBudget | None:
        """The budget set in the config (explicitly or the platform's default); None for "auto"."""
        scheduler_config = self.engine_config.scheduler_config
        if scheduler_config.max_num_batched_tokens is None:
            return None
        return ChosenBudget(scheduler_config.max_num_batched_tokens, scheduler_config.budget_reason)

    def capture_model(self) -> None:
        """Capture device graphs for the flat batch; devices without graphs run eagerly."""

    # ---- logic shared by every device -------------------------------------------------------------
    def initialize(self) -> ChosenBudget:
        """Load the model and its pooler, run the profile batch, capture device graphs; returns the token
        budget chosen (with its reason) for the engine's scheduler."""
        self.load_model()
        self.pooler = self._make_pooler()
        self.budget = self.profile_run()
        self.capture_model()
        return self.budget

    def _make_pooler(self) -> Pooler:
        if self.model is None:
            raise RuntimeError("call load_model() before making the pooler")
        return POOLERS[self.model_config.task](self.model, self.model_config, self.device, self.dtype)

    def prepare_inputs(self, requests: list[Request]) -> InputBatch:
        return InputBatch.build(
            requests, self.backend, self.device, task_adapters=self.model_config.task_adapters
        )

    @torch.inference_mode()
    def execute_model(self, batch: InputBatch) -> list[np.ndarray]:
        """One forward pass; returns one float32 vector per request, in batch order."""
        if self.model is None or self.pooler is None:
            raise RuntimeError("call initialize() before execute_model()")
        graph = self.cuda_graphs.graph_for(batch.num_tokens) if self.cuda_graphs is not None else None
        if graph is not None:
            hidden = self.graph_capturer.replay(graph, batch)  # [num_tokens, hidden_size]
        else:
            hidden = self._forward(batch)[: batch.num_tokens]  # without the row-bucket padding (CPU), if any
        return self.pooler(hidden, batch.pooling_metadata, batch.params)

    def _forward(self, batch: InputBatch) -> torch.Tensor:
        """The model over every row of ``batch``, padding included: [num_rows, hidden_size]."""
        assert self.model is not None  # initialize()
        with set_forward_context(batch.attn_metadata, batch.adapters):
            return self.model(batch.input_ids, batch.positions, batch.token_type_ids)

    def capture_while_idle(self, is_idle: Callable[[], bool]) -> int:
        """Idle-mode CUDA graphs: capture pending buckets while ``is_idle()``; call between batches only."""
        if self.cuda_graphs is None:
            return 0
        with torch.inference_mode():
            return self.cuda_graphs.capture_while_idle(is_idle)

    def has_pending_captures(self) -> bool:
        return self.cuda_graphs is not None and bool(self.cuda_graphs.pending_buckets())

    def _min_activation_bytes(self, num_tokens: int) -> int:
        """Lower bound of one layer's live activations: the MLP's intermediate states, fused QKV, the
        padded attention copies and a few hidden-size temporaries, per token."""
        per_token = self.model_config.intermediate_size + 10 * self.model_config.hidden_size
        return num_tokens * per_token * self.dtype.itemsize

    def _dummy_requests(self, num_seqs: int, seq_len: int) -> list[Request]:
        token_id = int(self.model_config.hf_config.get("pad_token_id") or 0) + 1
        return [Request(f"profile-{i}", token_ids=[token_id] * seq_len) for i in range(num_seqs)]
