"""What one engine step did, for logs and the server's metrics."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BatchStats:
    num_seqs: int
    num_tokens: int
    execute_seconds: float
    execute_cpu_seconds: float = 0.0  # the forward thread's CPU time (torch's intra-op workers not included)
    device_seconds: float = 0.0  # the GPU's time on it, from CUDA events (0 on CPU): wde/worker/busy_clock.py


@dataclass
class StepStats:
    num_waiting: int  # queued after this step's scheduling
    num_scheduled_seqs: int
    num_scheduled_tokens: int
    num_tokenized: int
    tokenize_seconds: float
    # batches whose forward pass completed during this step (async: possibly an earlier step's batch)
    finished_batches: list[BatchStats] = field(default_factory=list)
