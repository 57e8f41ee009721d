from __future__ import annotations

import logging
import time

import numpy as np
import torch

from wde.worker.busy_clock import BusyClock
from wde.worker.cuda_graph_capturer import TorchCudaGraphCapturer
from wde.worker.cuda_graphs import CudaGraphManager, graph_buckets
from wde.worker.input_batch import InputBatch
from wde.worker.model_runner import ModelRunnerBase

logger = logging.getLogger(__name__)


class GPUModelRunner(ModelRunnerBase):
    busy_clock: BusyClock  # the GPU's busy share (``/metrics``, the benches)

    def execute_model(self, batch: InputBatch) -> list[np.ndarray]:
        """The base runner's forward between two CUDA events, for the busy share."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        outputs = super().execute_model(batch)  # ends with the outputs' copy to the host
        end.record()
        self.last_device_seconds = self.busy_clock.add(start, end)  # type: ignore[arg-type]  # torch's Event
        return outputs

    def _cache_device_properties(self) -> None:
        self.busy_clock = BusyClock()
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
        start = time.perf_counter()
        super().load_model()
        torch.cuda.synchronize(self.device)
        logger.info(
            "weights on %s: %.1f MiB in %s, loaded in %.2fs",
            self.device_properties["name"],
            self.weight_bytes / 2**20,
            self.model_config.dtype,
            time.perf_counter() - start,
        )

    def capture_model(self) -> None:
        device_config = self.engine_config.device_config
        if device_config.cuda_graph_mode == "none":
            return
        model, backend = self.model, self.attn_backend_cls
        if model is None or backend is None:
            raise RuntimeError("capture_model() runs after load_model()")
        if not model.supports_cuda_graphs:
            logger.info(
                "cuda graphs off: %s lays its batch out from host-side lengths; running eagerly",
                self.model_config.architecture,
            )
            return
        if not backend.supports_cuda_graphs:
            logger.info(
                "cuda graphs off: attention backend %s builds per-batch metadata on the host "
                "(graphs need flash_attn or torch_varlen); running eagerly",
                backend.name,
            )
            return
        if self.budget is None:
            raise RuntimeError("capture_model() runs after profile_run() chose the token budget")
        buckets = graph_buckets(device_config.cuda_graph_buckets, self.budget.max_num_batched_tokens)
        max_num_seqs = self.engine_config.scheduler_config.max_num_seqs
        self.graph_capturer = TorchCudaGraphCapturer(self, buckets[-1], max_num_seqs)
        self.cuda_graphs = CudaGraphManager(buckets, device_config.cuda_graph_mode, self.graph_capturer)
        with torch.inference_mode():
            self.cuda_graphs.startup()
