"""All model-running logic; device subclasses override only the named hooks:
``_cache_device_properties``, ``load_model``, ``profile_run``, ``capture_model``."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch

from wde.config import EngineConfig
from wde.engine.request import Request
from wde.layers.attention.backend import AttentionBackend
from wde.layers.attention.selector import select_attention_backend
from wde.layers.forward_context import set_forward_context
from wde.layers.pooler.embedding_pooler import EmbeddingPooler
from wde.layers.pooler.score_pooler import ScorePooler
from wde.models.loader import load_model
from wde.platforms import Platform, get_platform
from wde.worker.input_batch import InputBatch

logger = logging.getLogger(__name__)

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
        # Attention backend: one instance shared by every layer.
        hf_config = self.model_config.hf_config
        num_heads = hf_config["num_attention_heads"]
        head_size = hf_config["hidden_size"] // num_heads
        backend_cls, self.skipped_backends = select_attention_backend(
            engine_config.device_config.attention_backend, self.platform, self.dtype, head_size
        )
        self.attn_backend: AttentionBackend = backend_cls(num_heads, head_size)
        self.model: torch.nn.Module | None = None
        self.pooler: EmbeddingPooler | ScorePooler | None = None

    # ---- device hooks -----------------------------------------------------------------------------
    def _cache_device_properties(self) -> None:
        """Read once at init what the device is (name, cores, memory); subclasses fill it in."""

    def load_model(self) -> None:
        start = time.perf_counter()
        self.model = load_model(self.model_config, self.attn_backend, self.device, self.dtype)
        num_params = sum(p.numel() for p in self.model.parameters())
        logger.info(
            "loaded %s (%s, %.1fM params) in %.2fs on %s in %s, attention backend %s",
            self.model_config.architecture,
            self.model_config.model,
            num_params / 1e6,
            time.perf_counter() - start,
            self.device,
            self.model_config.dtype,
            self.attn_backend.name,
        )

    def profile_run(self) -> None:
        """Run one worst-case batch (a full token budget of max-length sequences)."""
        scheduler_config = self.engine_config.scheduler_config
        max_model_len = self.model_config.max_model_len
        num_tokens = max(scheduler_config.max_num_batched_tokens, max_model_len)
        num_seqs = min(scheduler_config.max_num_seqs, max(1, num_tokens // max_model_len))
        self.execute_model(self.prepare_inputs(self._dummy_requests(num_seqs, max_model_len)))

    def capture_model(self) -> None:
        """Capture device graphs for the flat batch; devices without graphs run eagerly."""

    # ---- logic shared by every device -------------------------------------------------------------
    def initialize(self) -> None:
        self.load_model()
        self.pooler = self._make_pooler()
        self.profile_run()
        self.capture_model()

    def _make_pooler(self) -> EmbeddingPooler | ScorePooler:
        if self.model_config.task == "score":
            return ScorePooler(self.model, self.model_config.score_activation)
        return EmbeddingPooler(self.model_config.pooling)

    def prepare_inputs(self, requests: list[Request]) -> InputBatch:
        return InputBatch.build(requests, self.attn_backend, self.device)

    @torch.inference_mode()
    def execute_model(self, batch: InputBatch) -> list[np.ndarray]:
        """One forward pass; returns one float32 vector per request, in batch order."""
        if self.model is None or self.pooler is None:
            raise RuntimeError("call initialize() before execute_model()")
        with set_forward_context(batch.attn_metadata):
            hidden = self.model(
                batch.input_ids, batch.positions, batch.token_type_ids
            )  # [num_tokens, hidden]
        return self.pooler(hidden, batch.pooling_metadata, batch.params)

    def _dummy_requests(self, num_seqs: int, seq_len: int) -> list[Request]:
        token_id = int(self.model_config.hf_config.get("pad_token_id") or 0) + 1
        return [Request(f"profile-{i}", token_ids=[token_id] * seq_len) for i in range(num_seqs)]
