from __future__ import annotations

import logging
import time

import torch

from wde.models.loader import load_model
from wde.worker.model_runner import ModelRunnerBase

logger = logging.getLogger(__name__)


class GPUModelRunner(ModelRunnerBase):
    def _cache_device_properties(self) -> None:
        self.device = torch.device("cuda", torch.cuda.current_device())
        props = torch.cuda.get_device_properties(self.device)
        self.device_properties = {
            "name": props.name,
            "num_sms": props.multi_processor_count,
            "total_memory": props.total_memory,
            "compute_capability": f"{props.major}.{props.minor}",
        }
        logger.info("GPU: %s", self.device_properties)

    def load_model(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)
        before = torch.cuda.memory_allocated(self.device)
        start = time.perf_counter()
        self.model = load_model(self.model_config, self.attn_backend, self.device, self.dtype)
        torch.cuda.synchronize(self.device)
        logger.info(
            "loaded %s on %s in %.2fs: %.1f MiB of weights in %s, attention backend %s",
            self.model_config.architecture,
            self.device_properties["name"],
            time.perf_counter() - start,
            (torch.cuda.memory_allocated(self.device) - before) / 2**20,
            self.model_config.dtype,
            self.attn_backend.name,
        )

    def profile_run(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)
        base = torch.cuda.memory_allocated(self.device)
        super().profile_run()
        torch.cuda.synchronize(self.device)
        self.peak_activation_bytes = torch.cuda.max_memory_allocated(self.device) - base
        logger.info("profile run: peak activation memory %.1f MiB", self.peak_activation_bytes / 2**20)
