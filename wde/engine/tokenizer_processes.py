"""Tokenizer processes (``--tokenizer-processes N``): the tokenizer threads' work in processes of their own.

A tokenizer thread shares the engine's GIL for the Python side of every encoding: ``tokenizers`` makes one
``Encoding`` object and one ``ids`` list per text under it (about 10 µs a text of 80 tokens on a 2-core EPYC,
more on a GPU host's slower cores), so the engine thread and the threads take turns however many cores
there are. A process has its own GIL: it encodes a slice with its own copy of the tokenizer and sends back
four arrays (every text's ids back to back, their lengths, the type ids where there are any, and which were
cut); the engine thread only slices views out of them, and the batch concatenates those views.

A process that dies (a tokenizer crash) breaks the pool: its chunks' futures raise, the RequestProcessor
encodes those inputs itself, and the next ``submit`` starts a new pool.
"""

from __future__ import annotations

import logging
import multiprocessing
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from wde.engine.tokenizer_pool import Chunk, Encoding, Span, TokenizerInput, encode_inputs, slices
from wde.tokenizer import TokenizedInput, Tokenizer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TokenizerSpec:
    """What a process needs to load the engine's tokenizer as the engine did: a few small values, so that
    starting a process never waits on a large pickle."""

    path: Path
    special_tokens: tuple[str, ...]
    max_length: int
    pair_truncation: str

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> TokenizerSpec:
        if tokenizer.source is None:
            raise ValueError(
                "tokenizer processes need a tokenizer loaded from a model folder (Tokenizer.from_pretrained)"
            )
        path, special_tokens = tokenizer.source
        return cls(path, special_tokens, tokenizer.max_length, tokenizer.pair_truncation)

    def build(self) -> Tokenizer:
        path, special_tokens = self.path, self.special_tokens
        return Tokenizer.from_pretrained(path, self.max_length, self.pair_truncation, special_tokens)


@dataclass
class PackedEncodings:
    """A slice's encodings as arrays: one pickled buffer each, however many texts."""

    ids: np.ndarray  # [sum of lens] int32: every encoded input's ids back to back
    lens: np.ndarray  # [num_inputs] int64: 0 for a refused input
    type_ids: np.ndarray | None  # [sum of lens] int32 for the inputs in has_type_ids; None if none has them
    has_type_ids: np.ndarray  # [num_inputs] bool
    truncated: np.ndarray  # [num_inputs] bool
    errors: dict[int, str]  # refused inputs: position -> the tokenizer's message

    @classmethod
    def pack(cls, encodings: list[Encoding]) -> PackedEncodings:
        errors = {index: str(e) for index, e in enumerate(encodings) if isinstance(e, Exception)}
        kept = [encoding for encoding in encodings if not isinstance(encoding, Exception)]
        lens = np.array([0 if isinstance(e, Exception) else len(e.token_ids) for e in encodings], np.int64)
        has_type_ids = np.array(
            [not isinstance(e, Exception) and e.token_type_ids is not None for e in encodings], bool
        )
        with_types = [encoding.token_type_ids for encoding in kept if encoding.token_type_ids is not None]
        return cls(
            ids=np.fromiter(chain.from_iterable(e.token_ids for e in kept), np.int32, int(lens.sum())),
            lens=lens,
            type_ids=np.fromiter(chain.from_iterable(with_types), np.int32) if with_types else None,
            has_type_ids=has_type_ids,
            truncated=np.array([not isinstance(e, Exception) and e.truncated for e in encodings], bool),
            errors=errors,
        )

    def unpack(self) -> list[Encoding]:
        """Each input's encoding, its ids (and type ids) views of the arrays."""
        encodings: list[Encoding] = []
        start = type_start = 0
        has_type_ids, truncated = self.has_type_ids.tolist(), self.truncated.tolist()
        for index, num_ids in enumerate(self.lens.tolist()):
            if index in self.errors:
                encodings.append(ValueError(self.errors[index]))
                continue
            type_ids = None
            if has_type_ids[index] and self.type_ids is not None:
                type_ids = self.type_ids[type_start : type_start + num_ids]
                type_start += num_ids
            ids = self.ids[start : start + num_ids]
            encodings.append(TokenizedInput(ids, type_ids, truncated[index]))  # type: ignore[arg-type]
            start += num_ids
        return encodings


# the tokenizer of this process, when it is one of the pool's (set by _load_tokenizer)
_process_tokenizer: Tokenizer | None = None


def _load_tokenizer(spec: TokenizerSpec) -> None:
    global _process_tokenizer
    _process_tokenizer = spec.build()


def _encode_packed(inputs: list[TokenizerInput]) -> tuple[PackedEncodings | None, Span]:
    """In a pool process: encode a slice (None: a warm-up, which only loads the tokenizer)."""
    start = time.monotonic()
    if _process_tokenizer is None:
        raise RuntimeError("this process has no tokenizer: it is not one of a TokenizerProcesses pool")
    packed = PackedEncodings.pack(encode_inputs(_process_tokenizer, inputs)) if inputs else None
    return packed, (start, time.monotonic())


@contextmanager
def _main_module_hidden() -> Iterator[None]:
    """While processes start: a spawned process imports the parent's ``__main__`` (reruns the caller's
    script, which builds an engine again unless it is guarded by ``if __name__ == "__main__"``); these
    processes need only wde's modules, so they are started as from an interactive session, where
    ``__main__`` has neither a file nor a module spec."""
    main = sys.modules["__main__"]
    saved: dict[str, object] = {
        name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__
    }
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.update(saved)


class TokenizerProcesses:
    def __init__(self, num_processes: int, tokenizer: Tokenizer) -> None:
        if num_processes < 1:
            raise ValueError(f"tokenizer_processes ({num_processes}) must be >= 1")
        self.num_processes = num_processes
        self.spec = TokenizerSpec.of(tokenizer)
        self._pool = self._start()

    def _start(self) -> ProcessPoolExecutor:
        """A new pool; every process is started now and loads the tokenizer while the engine warms up."""
        pool = ProcessPoolExecutor(
            self.num_processes,
            mp_context=multiprocessing.get_context("spawn"),  # no fork of the engine's threads
            initializer=_load_tokenizer,
            initargs=(self.spec,),
        )
        with _main_module_hidden():  # each submit starts one process while none is idle
            for _ in range(self.num_processes):
                pool.submit(_encode_packed, [])
        return pool

    def submit(self, inputs: Sequence[TokenizerInput]) -> Chunk:
        """Start encoding ``inputs``, one slice per process (at least ``MIN_SLICE`` inputs each)."""
        inputs = list(inputs)
        parts = slices(inputs, self.num_processes)
        try:
            futures = [self._pool.submit(_encode_packed, part) for part in parts]
        except BrokenProcessPool:
            logger.warning("a tokenizer process died; starting %d new ones", self.num_processes)
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._start()
            futures = [self._pool.submit(_encode_packed, part) for part in parts]
        return Chunk(inputs, futures, unpack=PackedEncodings.unpack)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
