"""Row buckets: on CPU, a forward pass over oneDNN GEMMs sees token counts from a small fixed set.

oneDNN builds a primitive (JIT kernels, a blocking plan) for every input shape it meets and keeps it, in
two caches of 1,024 entries each (ideep's ``LRU_CACHE_CAPACITY``, oneDNN's
``ONEDNN_PRIMITIVE_CACHE_CAPACITY``): ~0.6 MiB plus ~0.9 KiB per row each, measured on 2 cores of an
AVX-512 EPYC with all-MiniLM-L6-v2's four linear shapes. A token-budget batch has a new token count almost
every step, so a server grew by hundreds of MiB per model before those caches filled (issue 41), and each
new count built its primitives on the hot path (~2 ms each). Bounding the caches alone does not bound the
memory, and bounding both rebuilds primitives in most steps.

So the CPU runner pads the flat batch up to ``bucket_rows(num_tokens)`` with dummy sequences
(``InputBatch.build``'s ``padding_lens``): real sequences to every layer and attention backend, dropped
before pooling. The real sequences' results do not change: a GEMM computes each row from its own input
row, and attention stays within a sequence. Where the block GEMMs build no per-shape primitives (aten's
float32 GEMM is MKL's; ``torch._int_mm`` showed no growth) the runner does not pad.

A server's engine thread, while idle, runs the buckets up to ``IDLE_WARM_MAX_ROWS`` once, smallest first
(``CPUModelRunner.capture_while_idle``, the hook idle-mode CUDA graphs use on GPUs): the primitives of its
interactive traffic are built before that traffic comes, and its memory is flat from the start.

Buckets: ``MIN_BUCKET_ROWS``, then ``STEPS_PER_OCTAVE`` evenly spaced counts per power of two: at most
12.5% more rows (1025 -> 1152), ~4% on average; 57 buckets up to 2,048 tokens. ``WDE_ROW_BUCKETS=0`` turns
the padding off (to measure what it costs); docs/benchmarks.md ("Row buckets") has the measurements.
"""

from __future__ import annotations

import functools
import os

ROW_BUCKETS_ENV = "WDE_ROW_BUCKETS"
IDLE_WARM_MAX_ROWS = 512  # buckets a server's engine runs once while idle (interactive traffic's sizes)
MIN_BUCKET_ROWS = 16  # a one-text batch: padding a GEMM this small costs little beyond reading the weight
STEPS_PER_OCTAVE = 8


def row_buckets_enabled() -> bool:
    """False where ``WDE_ROW_BUCKETS`` is 0 / false / off / no."""
    return os.environ.get(ROW_BUCKETS_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def bucket_rows(num_rows: int) -> int:
    """The smallest bucket that holds ``num_rows`` (>= 1)."""
    if num_rows <= MIN_BUCKET_ROWS:
        return MIN_BUCKET_ROWS
    octave = 1 << ((num_rows - 1).bit_length() - 1)  # the largest power of two below num_rows
    step = max(octave // STEPS_PER_OCTAVE, 1)
    return -(-num_rows // step) * step


@functools.cache
def buckets_up_to(max_rows: int) -> tuple[int, ...]:
    """Every bucket of at most ``max_rows`` rows, ascending."""
    return tuple(sorted(b for b in {bucket_rows(n) for n in range(1, max_rows + 1)} if b <= max_rows))


NUM_BUCKETS_TO_2048 = len(buckets_up_to(2048))  # 57


def padding_lengths(num_padding_tokens: int, max_len: int) -> list[int]:
    """The dummy sequences that hold ``num_padding_tokens``: as few as fit, none longer than ``max_len``."""
    num_full, rest = divmod(num_padding_tokens, max_len)
    return [max_len] * num_full + ([rest] if rest else [])
