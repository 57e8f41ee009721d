from __future__ import annotations

import logging
import os
import platform as py_platform
import time
from collections.abc import Callable

import torch

from wde.layers.packed_linear import GEMM_ENV, PackedLinear, forced_float_gemm, pack_float_linears
from wde.layers.quantization.int8_linear import Int8Linear
from wde.layers.quantization.quantize import block_linears
from wde.request import Request
from wde.worker.input_batch import InputBatch
from wde.worker.memory_budget import ChosenBudget
from wde.worker.model_runner import ModelRunnerBase
from wde.worker.row_buckets import (
    IDLE_WARM_MAX_ROWS,
    NUM_BUCKETS_TO_2048,
    ROW_BUCKETS_ENV,
    bucket_rows,
    buckets_up_to,
    padding_lengths,
    row_buckets_enabled,
)

logger = logging.getLogger(__name__)


class CPUModelRunner(ModelRunnerBase):
    pads_to_row_buckets = False  # set by load_model: the batch is padded to a row bucket (row_buckets.py)
    warm_buckets: set[int]  # the row buckets a forward has run on (their oneDNN primitives are built)
    warm_up_seconds = 0.0  # the idle warm-up's forwards so far

    def _cache_device_properties(self) -> None:
        isa = torch.backends.cpu.get_cpu_capability()
        self.device_properties = {
            "name": py_platform.processor() or py_platform.machine(),
            "num_cpus": os.cpu_count(),
            "num_threads": torch.get_num_threads(),
            "isa": isa,
        }
        logger.info("CPU: %s", self.device_properties)
        if self.dtype == torch.bfloat16 and isa in ("DEFAULT", "AVX2"):
            logger.warning(
                "dtype bfloat16 on a CPU without AVX-512/AMX (torch reports %s): matmuls fall back to slow "
                "emulation (~7x slower than float32 on a 2-core AVX2 EPYC); pass --dtype float32 (or --dtype "
                "fast, which picks bfloat16 only where the CPU computes it natively)",
                isa,
            )

    def _prepare_weights(self) -> None:
        """float32 block linears packed for oneDNN where that measures faster here
        (wde/layers/packed_linear.py); int8 and compiled models have their own GEMMs."""
        if self.dtype != torch.float32 or self.model_config.quantization is not None:
            return
        assert self.model is not None  # load_model
        if not row_buckets_enabled() and forced_float_gemm() is None:
            logger.info(
                "float32 GEMM aten: row buckets are off (%s=0), and oneDNN's packed GEMM would then build a "
                "primitive per batch shape, memory that grows under load (%s=onednn_packed forces it)",
                ROW_BUCKETS_ENV,
                GEMM_ENV,
            )
            return
        gemm = pack_float_linears(block_linears(self.model))
        bounded = (
            f"; row buckets bound its oneDNN primitives to {NUM_BUCKETS_TO_2048} token counts up to 2,048"
        )
        logger.info(
            "float32 GEMM %s: %s%s", gemm.name, gemm.why, bounded if gemm.name == "onednn_packed" else ""
        )

    def load_model(self) -> None:
        super().load_model()
        self.warm_buckets = set()
        why = self._per_shape_gemms()
        self.pads_to_row_buckets = why is not None and row_buckets_enabled()
        if why is None:
            return
        if self.pads_to_row_buckets:
            logger.info("row buckets on: %s builds a oneDNN primitive per token count", why)
        else:
            logger.info(
                "row buckets off (%s=0): %s builds a oneDNN primitive per token count", ROW_BUCKETS_ENV, why
            )

    def _per_shape_gemms(self) -> str | None:
        """Which of this model's block GEMMs build a oneDNN primitive for every row count (memory that grows
        with each new batch shape), or None where none does (aten's float32 GEMM, ``torch._int_mm``)."""
        assert self.model is not None  # load_model
        if self.dtype == torch.bfloat16:
            return "bfloat16 (oneDNN's matmul)"
        for module in self.model.modules():
            if isinstance(module, PackedLinear):
                return "the float32 GEMM onednn_packed"
            if isinstance(module, Int8Linear) and module.gemm_name == "onednn_u8s8":
                return "the int8 GEMM onednn_u8s8"
        return None

    def prepare_inputs(self, requests: list[Request]) -> InputBatch:
        """The flat batch, padded with dummy sequences up to its row bucket where the GEMMs need it."""
        if not self.pads_to_row_buckets:
            return super().prepare_inputs(requests)
        num_tokens = sum(request.num_tokens for request in requests)
        bucket = bucket_rows(num_tokens)
        self.warm_buckets.add(bucket)
        padding = self._padding(bucket - num_tokens)
        adapters = self.model_config.task_adapters
        return InputBatch.build(requests, self.backend, self.device, padding, task_adapters=adapters)

    # ---- while the engine thread is idle (what CUDA graphs do on GPUs): the small buckets' primitives ----
    def has_pending_captures(self) -> bool:
        return bool(self._cold_buckets())

    def capture_while_idle(self, is_idle: Callable[[], bool]) -> int:
        """One forward of dummy sequences per row bucket up to ``IDLE_WARM_MAX_ROWS`` not run yet, smallest
        first, while ``is_idle()``: a server builds the primitives of its interactive traffic while it waits
        for it (memory flat from the start; no build on a request's path). Larger buckets, the throughput
        work's, are built on first use. Returns how many buckets it ran."""
        num_warmed, start = 0, time.perf_counter()
        with torch.inference_mode():
            for bucket in self._cold_buckets():
                if not is_idle():
                    break
                self.warm_buckets.add(bucket)  # tried once, whatever happens
                batch = InputBatch.build([], self.backend, self.device, self._padding(bucket))
                try:
                    self._forward(batch)
                except Exception as e:  # a warm-up costs a first request's speed at worst, never the engine
                    logger.warning(
                        "row bucket warm-up stopped at %d tokens (%s); the rest build on first use", bucket, e
                    )
                    self.warm_buckets.update(self._cold_buckets())
                    break
                num_warmed += 1
        self.warm_up_seconds += time.perf_counter() - start
        if num_warmed and not self._cold_buckets():
            logger.info(
                "row buckets up to %d tokens built while idle (%.2f s of forwards)",
                IDLE_WARM_MAX_ROWS,
                self.warm_up_seconds,
            )
        return num_warmed

    def _cold_buckets(self) -> list[int]:
        """The buckets up to IDLE_WARM_MAX_ROWS (and the token budget) no forward has run on, ascending."""
        if not self.pads_to_row_buckets or self.budget is None:
            return []  # before initialize() (its profile run sets the budget)
        limit = min(IDLE_WARM_MAX_ROWS, self.budget.max_num_batched_tokens)
        return [bucket for bucket in buckets_up_to(limit) if bucket not in self.warm_buckets]

    def _padding(self, num_rows: int) -> list[int]:
        return padding_lengths(num_rows, self.model_config.max_model_len)

    def profile_run(self) -> ChosenBudget:
        """With a fixed budget a short warm-up is enough on CPU (it builds the oneDNN/MKL kernels before the
        first request); an "auto" budget runs the full measured profile."""
        configured = self._configured_budget()
        if configured is None:
            return super().profile_run()
        seq_len = min(self.model_config.max_model_len, 16)
        self.execute_model(self.prepare_inputs(self._dummy_requests(2, seq_len)))
        return configured
