from __future__ import annotations

import logging
import os
import platform as py_platform

import torch

from wde.layers.packed_linear import pack_float_linears
from wde.layers.quantization.quantize import block_linears
from wde.worker.memory_budget import ChosenBudget
from wde.worker.model_runner import ModelRunnerBase

logger = logging.getLogger(__name__)


class CPUModelRunner(ModelRunnerBase):
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
        gemm = pack_float_linears(block_linears(self.model))
        logger.info("float32 GEMM %s: %s", gemm.name, gemm.why)

    def profile_run(self) -> ChosenBudget:
        """With a fixed budget a short warm-up is enough on CPU (it builds the oneDNN/MKL kernels before the
        first request); an "auto" budget runs the full measured profile."""
        configured = self._configured_budget()
        if configured is None:
            return super().profile_run()
        seq_len = min(self.model_config.max_model_len, 16)
        self.execute_model(self.prepare_inputs(self._dummy_requests(2, seq_len)))
        return configured
