"""CUDA-graph policy for the flat batch, independent of CUDA itself (the capturer does the device work).

A batch of ``num_tokens`` runs in the graph of the smallest bucket >= num_tokens (inputs padded up to the
bucket); a batch larger than every bucket runs eagerly. Modes:

- ``none``:  never capture.
- ``eager``: capture every bucket at start-up, largest first (smaller graphs reuse its memory pool).
- ``lazy``:  capture the largest bucket at start-up; every other bucket on its first use.
- ``idle``:  lazy, plus capture of the remaining buckets (largest first) while the engine has nothing queued.

Captures only happen on the thread that runs forward passes, between batches, so never while another batch
is executing. A failed capture logs a warning and leaves that bucket eager for good.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from wde.config import CUDA_GRAPH_MODE_NAMES

logger = logging.getLogger(__name__)

# Default buckets: 256 up to 8,192 tokens (or the budget, if smaller) in quarter octaves, so a batch is
# padded by at most 25%. Larger batches run eagerly: their kernels are long enough that launches cost
# little, and padding them to a graph's size cost more than the graph saved (H200, 2026-11-27: BERT-large
# 551,675 tokens/s eager vs 386,658 with the old doubling buckets' 32,768 / 65,536 graphs; BERT-base
# 1,006,134 vs 915,729).
MIN_DEFAULT_BUCKET = 256
MAX_DEFAULT_BUCKET = 8192
BUCKETS_PER_OCTAVE = 4


def default_buckets(max_num_batched_tokens: int) -> list[int]:
    largest = min(max_num_batched_tokens, MAX_DEFAULT_BUCKET)
    buckets: list[int] = []
    octave = MIN_DEFAULT_BUCKET
    while octave < largest:
        steps = (octave + octave * step // BUCKETS_PER_OCTAVE for step in range(BUCKETS_PER_OCTAVE))
        buckets.extend(bucket for bucket in steps if bucket < largest)
        octave *= 2
    return [*buckets, largest]


def graph_buckets(requested: Sequence[int] | None, max_num_batched_tokens: int) -> list[int]:
    """Sorted buckets: the defaults, or the requested ones up to the token budget with the budget itself
    as the largest."""
    if requested is None:
        return default_buckets(max_num_batched_tokens)
    for bucket in requested:
        if isinstance(bucket, bool) or not isinstance(bucket, int) or bucket < 1:
            raise ValueError(f"cuda graph buckets must be positive ints, got {bucket!r}")
    return sorted(
        {bucket for bucket in requested if bucket < max_num_batched_tokens} | {max_num_batched_tokens}
    )


def choose_bucket(num_tokens: int, buckets: Sequence[int]) -> int | None:
    """Smallest bucket that holds ``num_tokens`` (buckets sorted ascending); None when none does."""
    index = bisect.bisect_left(buckets, num_tokens)
    return buckets[index] if index < len(buckets) else None


class GraphCapturer(Protocol):
    """Does the device work: capture one graph for a padded token count, and report its memory."""

    def capture(self, num_tokens: int) -> Any: ...

    def memory_bytes(self) -> int: ...


@dataclass
class CaptureRecord:
    bucket: int
    seconds: float
    memory_bytes: int
    when: str  # "startup", "first use", "idle"


@dataclass
class CudaGraphManager:
    buckets: list[int]  # ascending
    mode: str
    capturer: GraphCapturer
    graphs: dict[int, Any] = field(default_factory=dict)
    failed: set[int] = field(default_factory=set)
    records: list[CaptureRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.mode not in CUDA_GRAPH_MODE_NAMES:
            raise ValueError(f"cuda_graph_mode {self.mode!r} is not one of {CUDA_GRAPH_MODE_NAMES}")

    # 1. start-up --------------------------------------------------------------------------------
    def startup(self) -> None:
        if self.mode == "none" or not self.buckets:
            return
        start = time.perf_counter()
        to_capture = self.buckets[::-1] if self.mode == "eager" else self.buckets[-1:]
        for bucket in to_capture:
            self._capture(bucket, "startup")
        logger.info(
            "cuda graphs (%s): captured %s at start-up in %.2fs, %.1f MiB of graph memory",
            self.mode,
            sorted(self.graphs),
            time.perf_counter() - start,
            self.capturer.memory_bytes() / 2**20,
        )

    # 2. per batch -------------------------------------------------------------------------------
    def graph_for(self, num_tokens: int) -> tuple[int, Any] | None:
        """(bucket, graph) to replay for a batch of ``num_tokens``, capturing it now in lazy/idle mode;
        None means run eagerly."""
        if self.mode == "none":
            return None
        bucket = choose_bucket(num_tokens, self.buckets)
        if bucket is None or bucket in self.failed:
            return None
        if bucket not in self.graphs and not self._capture(bucket, "first use"):
            return None
        return bucket, self.graphs[bucket]

    # 3. while idle ------------------------------------------------------------------------------
    def pending_buckets(self) -> list[int]:
        """Buckets idle capture would still take, largest first."""
        if self.mode != "idle":
            return []
        return [b for b in reversed(self.buckets) if b not in self.graphs and b not in self.failed]

    def capture_while_idle(self, is_idle: Callable[[], bool]) -> int:
        """Capture pending buckets one at a time while ``is_idle()`` holds; returns how many were captured."""
        num_captured = 0
        for bucket in self.pending_buckets():
            if not is_idle():
                break
            num_captured += int(self._capture(bucket, "idle"))
        return num_captured

    def _capture(self, bucket: int, when: str) -> bool:
        memory_before = self.capturer.memory_bytes()
        start = time.perf_counter()
        try:
            self.graphs[bucket] = self.capturer.capture(bucket)
        except Exception as e:  # a capture failure costs speed for this bucket, never the engine
            self.failed.add(bucket)
            logger.warning(
                "cuda graph capture for %d tokens failed (%s); that bucket runs eagerly", bucket, e
            )
            return False
        record = CaptureRecord(
            bucket, time.perf_counter() - start, self.capturer.memory_bytes() - memory_before, when
        )
        self.records.append(record)
        logger.info(
            "captured cuda graph for %d tokens (%s) in %.3fs, +%.1f MiB",
            bucket,
            when,
            record.seconds,
            record.memory_bytes / 2**20,
        )
        return True
