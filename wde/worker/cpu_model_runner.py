from __future__ import annotations

import logging
import os
import platform as py_platform

import torch

from wde.worker.model_runner import ModelRunnerBase

logger = logging.getLogger(__name__)


class CPUModelRunner(ModelRunnerBase):
    def _cache_device_properties(self) -> None:
        self.device_properties = {
            "name": py_platform.processor() or py_platform.machine(),
            "num_cpus": os.cpu_count(),
            "num_threads": torch.get_num_threads(),
            "isa": torch.backends.cpu.get_cpu_capability(),
        }
        logger.info("CPU: %s", self.device_properties)

    def profile_run(self) -> None:
        """On CPU a short warm-up is enough: it builds the oneDNN/MKL kernels before the first request."""
        seq_len = min(self.model_config.max_model_len, 16)
        self.execute_model(self.prepare_inputs(self._dummy_requests(2, seq_len)))
