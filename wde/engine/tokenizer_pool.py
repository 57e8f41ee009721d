"""Tokenizer threads: the engine hands over a chunk of waiting requests' tokenizer inputs and goes on
scheduling and running batches while they are tokenized. ``tokenizers`` releases the GIL while it encodes,
so the threads run beside the engine thread (and beside the forward on a GPU); a chunk is split into one
slice per thread. Within one call ``tokenizers`` also spreads the texts over its own threads, unless
``TOKENIZERS_PARALLELISM=false``: then these threads are the only parallelism. What the threads cannot
shed is the GIL each encoding's Python objects take; ``tokenizer_processes.py`` runs the same work in
processes."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from wde.platforms.cores import usable_cores
from wde.thread_names import name_os_thread
from wde.tokenizer import TextInput, TokenizedInput, Tokenizer, Truncation

# One request's tokenizer input: the text (or pair) with its prompt or template, and how it is cut (None: to
# the engine's max_model_len from the right)
TokenizerInput = tuple[TextInput, Truncation | None]
Encoding = TokenizedInput | Exception  # an input the tokenizer refused keeps its error, alone
Span = tuple[float, float]  # a slice's encode, start and end (time.monotonic: one clock for every process)

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


class SliceResult(Protocol):
    """A slice's (result, span) to come: a thread's ``Future``, or a tokenizer process's pending slice."""

    def done(self) -> bool: ...

    def result(self) -> tuple[Any, Span]: ...


class Chunk:
    """One hand-over: its inputs, and per slice a future of (that slice's result, its span); ``unpack``
    turns a slice's result into its encodings (a tokenizer process sends arrays, not objects)."""

    def __init__(
        self,
        inputs: list[TokenizerInput],
        futures: Sequence[SliceResult],
        unpack: Callable[[Any], list[Encoding]] | None = None,
    ) -> None:
        self.inputs = inputs
        self.futures = futures
        self.unpack = unpack

    def done(self) -> bool:
        return all(future.done() for future in self.futures)

    def results(self) -> tuple[list[Encoding], Span]:
        """Every input's encoding in order (waits for the slices), and the span the slices took together;
        raises what a slice raised."""
        encodings: list[Encoding] = []
        starts, ends = [], []
        for future in self.futures:
            result, (start, end) = future.result()
            encodings.extend(result if self.unpack is None else self.unpack(result))
            starts.append(start)
            ends.append(end)
        return encodings, (min(starts), max(ends))


class EncoderPool(Protocol):
    """What the RequestProcessor hands chunks to: ``TokenizerPool`` (threads) or ``TokenizerProcesses``."""

    def submit(self, inputs: Sequence[TokenizerInput]) -> Chunk: ...

    def shutdown(self) -> None: ...


class TokenizerPool:
    def __init__(self, num_workers: int, tokenizer: Tokenizer) -> None:
        if num_workers < 1:
            raise ValueError(f"tokenizer_workers ({num_workers}) must be >= 1")
        self.num_workers = num_workers
        self.tokenizer = tokenizer
        self._pool = ThreadPoolExecutor(
            num_workers, thread_name_prefix="wde-tokenize", initializer=name_os_thread
        )

    def submit(self, inputs: Sequence[TokenizerInput]) -> Chunk:
        """Start encoding ``inputs``, one slice per thread (at least ``MIN_SLICE`` inputs each)."""
        inputs = list(inputs)
        futures = [
            self._pool.submit(_timed_encode, self.tokenizer, part)
            for part in slices(inputs, self.num_workers)
        ]
        return Chunk(inputs, futures)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def slices(inputs: list[TokenizerInput], num_workers: int) -> list[list[TokenizerInput]]:
    """One slice per worker, at least ``MIN_SLICE`` inputs each, in order."""
    num_slices = max(1, min(num_workers, len(inputs) // MIN_SLICE))
    size = -(-len(inputs) // num_slices)
    return [inputs[start : start + size] for start in range(0, len(inputs), size)]


def encode_inputs(tokenizer: Tokenizer, inputs: Sequence[TokenizerInput]) -> list[Encoding]:
    """Each input's encoding, or the error for one the tokenizer refused; one batched call per truncation
    (a call that raises is redone one input at a time, so that the refused input fails alone)."""
    groups: dict[Truncation | None, list[int]] = {}
    for index, (_, truncation) in enumerate(inputs):
        groups.setdefault(truncation, []).append(index)
    by_position: dict[int, Encoding] = {}
    for truncation, indices in groups.items():
        group = [inputs[index][0] for index in indices]
        try:
            encodings: list[Encoding] = list(tokenizer.encode_batch(group, truncation))
        except Exception:
            encodings = [_encode_one(tokenizer, text, truncation) for text in group]
        by_position.update(zip(indices, encodings, strict=True))
    return [by_position[index] for index in range(len(inputs))]


def _encode_one(tokenizer: Tokenizer, text: TextInput, truncation: Truncation | None) -> Encoding:
    try:
        return tokenizer.encode_batch([text], truncation)[0]
    except Exception as e:
        return e


def _timed_encode(tokenizer: Tokenizer, inputs: list[TokenizerInput]) -> tuple[list[Encoding], Span]:
    start = time.monotonic()
    encodings = encode_inputs(tokenizer, inputs)
    return encodings, (start, time.monotonic())
