"""Tokenizer threads: the engine hands over a chunk of waiting requests and goes on scheduling and running
batches while they are tokenized. ``tokenizers`` releases the GIL while it encodes, so the threads run
beside the engine thread (and beside the forward on a GPU); a chunk is split into one slice per thread.
Within one call ``tokenizers`` also spreads the texts over its own threads, unless
``TOKENIZERS_PARALLELISM=false``: then these threads are the only parallelism."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from wde.platforms.cores import usable_cores

Item = TypeVar("Item")
Result = TypeVar("Result")

MIN_SLICE = 32  # texts per thread at least: below this a slice costs more in hand-over than it saves


def default_tokenizer_workers(device_type: str) -> int:
    """On CPU none: the forward already uses every core, and tokenizing beside it only slows both (2-core
    EPYC, 16,000 docs on a 1-layer model: 189 us a text with a thread, 152 without). Elsewhere one thread
    while ``tokenizers`` spreads each call over the cores itself; else the cores this process may use, minus
    one for the engine thread (at least 1)."""
    if device_type == "cpu":
        return 0
    if os.environ.get("TOKENIZERS_PARALLELISM", "").lower() not in ("false", "0", "off", "no"):
        return 1
    return max(1, usable_cores() - 1)


class Chunk(Generic[Item, Result]):
    """One hand-over: its items, and per slice a future of (results, (start, end) of the encode)."""

    def __init__(self, items: list[Item], futures: list[Future[tuple[list[Result], tuple[float, float]]]]):
        self.items = items
        self.futures = futures

    def done(self) -> bool:
        return all(future.done() for future in self.futures)

    def results(self) -> tuple[list[Result], tuple[float, float]]:
        """Every item's result in order (waits for the slices), and the span the slices took together."""
        results: list[Result] = []
        starts, ends = [], []
        for future in self.futures:
            slice_results, (start, end) = future.result()
            results.extend(slice_results)
            starts.append(start)
            ends.append(end)
        return results, (min(starts), max(ends))


class TokenizerPool:
    def __init__(self, num_workers: int) -> None:
        if num_workers < 1:
            raise ValueError(f"tokenizer_workers ({num_workers}) must be >= 1")
        self.num_workers = num_workers
        self._pool = ThreadPoolExecutor(num_workers, thread_name_prefix="wde-tokenize")

    def submit(
        self, encode: Callable[[list[Item]], list[Result]], items: Sequence[Item]
    ) -> Chunk[Item, Result]:
        """Start ``encode`` over ``items``, one slice per thread (at least ``MIN_SLICE`` items each)."""
        items = list(items)
        num_slices = max(1, min(self.num_workers, len(items) // MIN_SLICE))
        size = -(-len(items) // num_slices)
        futures = [
            self._pool.submit(_timed, encode, items[start : start + size])
            for start in range(0, len(items), size)
        ]
        return Chunk(items, futures)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _timed(
    encode: Callable[[list[Item]], list[Result]], items: list[Item]
) -> tuple[list[Result], tuple[float, float]]:
    start = time.monotonic()
    results = encode(items)
    return results, (start, time.monotonic())
