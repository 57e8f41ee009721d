"""Interleaved timing: every system stays loaded, is warmed up once, then each repeat times one pass of every
system in turn (A B C, A B C, ...). Load from other processes, thermal state and turbo then weigh on every
system alike, where timing one system's repeats back to back would hand a drift to whichever ran during it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np


class System(Protocol):
    """Something that embeds the benchmark's texts and stays loaded between passes."""

    label: str
    dtype: str  # the dtype whose matmul peak its GFLOP/s is compared with

    def time_pass(self, keep: bool) -> float:
        """Seconds of one pass over the texts; with ``keep`` its embeddings become ``last_embeddings``."""
        ...

    def last_embeddings(self) -> np.ndarray: ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """Untimed embeddings of other texts (the quality columns)."""
        ...


class InProcessSystem:
    """A system run in this process (sentence-transformers, wde): ``encode`` maps texts to embeddings (or a
    cross-encoder's (query, document) pairs to ``[num_pairs, 1]`` scores)."""

    def __init__(
        self, label: str, dtype: str, encode: Callable[[list[Any]], np.ndarray], texts: list[Any]
    ) -> None:
        self.label, self.dtype, self.encode, self.texts = label, dtype, encode, texts
        self._last: np.ndarray | None = None

    def time_pass(self, keep: bool) -> float:
        start = time.perf_counter()
        embeddings = self.encode(self.texts)
        seconds = time.perf_counter() - start
        if keep:
            self._last = np.asarray(embeddings, dtype=np.float32)
        return seconds

    def last_embeddings(self) -> np.ndarray:
        if self._last is None:
            raise RuntimeError(f"{self.label}: no pass kept yet")
        return self._last

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.encode(texts), dtype=np.float32)


def interleaved_order(num_systems: int, repeats: int) -> list[tuple[int, int]]:
    """(repeat, system index) in timing order: one warm-up round (repeat -1), then round-robin per repeat."""
    return [(repeat, system) for repeat in range(-1, repeats) for system in range(num_systems)]


def time_interleaved(
    systems: Sequence[System], repeats: int, progress: Callable[[str], None] | None = None
) -> list[list[float]]:
    """Seconds per repeat of each system, timed round-robin after one untimed warm-up round; the last repeat
    of each is kept for ``last_embeddings``."""
    seconds: list[list[float]] = [[] for _ in systems]
    for repeat, index in interleaved_order(len(systems), repeats):
        elapsed = systems[index].time_pass(keep=repeat == repeats - 1)
        if repeat >= 0:
            seconds[index].append(elapsed)
        if progress:
            what = "warm-up" if repeat < 0 else f"repeat {repeat + 1}/{repeats}"
            progress(f"{systems[index].label}: {what} {elapsed:.2f} s")
    return seconds
