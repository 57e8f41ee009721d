"""Tokenizer processes (``--tokenizer-processes N``): the tokenizer threads' work in processes of their own.

A tokenizer thread shares the engine's GIL for the Python side of every encoding: ``tokenizers`` makes one
``Encoding`` object and one ``ids`` list per text under it (about 10 µs a text of 80 tokens on a 2-core EPYC,
more on a GPU host's slower cores), so the engine thread and the threads take turns however many cores
there are. A process has its own GIL: it encodes a slice with its own copy of the tokenizer and sends back
four arrays (every text's ids back to back, their lengths, the type ids where there are any, and which were
cut); the engine thread only slices views out of them, and the batch concatenates those views.

Slices go out and answers come back over ZMQ (a socket into each process, one shared socket out of them,
in a private temporary folder): a send never waits for the process, and the engine thread reads the answers
when it checks a chunk, so a hand-over costs a pickle and a socket write, no thread of Python's own. A
process that dies (a tokenizer crash) fails its unanswered slices, which the RequestProcessor then encodes
itself, and another process takes its place.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import shutil
import sys
import tempfile
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from itertools import chain
from multiprocessing.process import BaseProcess
from pathlib import Path

import numpy as np
import zmq

from wde.engine.tokenizer_pool import Chunk, Encoding, Span, TokenizerInput, encode_inputs, slices
from wde.tokenizer import TokenizedInput, Tokenizer

logger = logging.getLogger(__name__)

PARENT_CHECK_MS = 1000  # an idle process checks this often that the engine's process still lives
DEATH_CHECK_MS = 200  # a wait for an answer checks this often that the processes still live
SHUTDOWN_WAIT_S = 2.0


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
            encodings.append(TokenizedInput(ids, type_ids, truncated[index]))
            start += num_ids
        return encodings


def _serve(spec: TokenizerSpec, slices_address: str, results_address: str, parent_pid: int) -> None:
    """A tokenizer process: encode each slice that arrives, send back its arrays; end on a ``None`` slice or
    when the engine's process is gone."""
    tokenizer = spec.build()
    context = zmq.Context()
    inbox, outbox = context.socket(zmq.PULL), context.socket(zmq.PUSH)
    inbox.bind(slices_address)
    outbox.connect(results_address)
    while True:
        if not inbox.poll(PARENT_CHECK_MS):
            if os.getppid() != parent_pid:
                return
            continue
        slice_id, inputs = inbox.recv_pyobj()
        if inputs is None:
            break
        start = time.monotonic()
        try:
            packed = PackedEncodings.pack(encode_inputs(tokenizer, inputs))
            outbox.send_pyobj((slice_id, (packed, (start, time.monotonic())), None))
        except Exception as e:  # not an input's refusal (encode_inputs keeps those): the whole slice's
            outbox.send_pyobj((slice_id, None, repr(e)))
    outbox.close(linger=1000)
    inbox.close(linger=0)
    context.term()


@contextmanager
def _main_module_hidden() -> Iterator[None]:
    """While a process starts: a spawned process imports the parent's ``__main__`` (reruns the caller's
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


class PendingSlice:
    """One slice sent to one process; ``done`` and ``result`` as a ``Future``'s, read by the engine thread
    (the pool reads the processes' answers when asked, no thread of its own)."""

    def __init__(self, pool: TokenizerProcesses) -> None:
        self.pool = pool
        self.finished = False
        self.value: tuple[PackedEncodings, Span] | None = None
        self.error: Exception | None = None

    def finish(self, value: tuple[PackedEncodings, Span] | None, error: Exception | None) -> None:
        self.value, self.error, self.finished = value, error, True

    def done(self) -> bool:
        if not self.finished:
            self.pool.receive(timeout_ms=0)
        return self.finished

    def result(self) -> tuple[PackedEncodings, Span]:
        while not self.finished:
            self.pool.receive(timeout_ms=DEATH_CHECK_MS)
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value


@dataclass
class _Worker:
    process: BaseProcess
    socket: zmq.Socket[bytes]  # connected to the process's inbox
    pending: dict[int, PendingSlice]  # sent, not answered


class TokenizerProcesses:
    def __init__(self, num_processes: int, tokenizer: Tokenizer) -> None:
        if num_processes < 1:
            raise ValueError(f"tokenizer_processes ({num_processes}) must be >= 1")
        self.num_processes = num_processes
        self.spec = TokenizerSpec.of(tokenizer)
        self._folder = tempfile.mkdtemp(prefix="wde-tokenize-")  # the sockets: only this user reaches them
        # removed at shutdown, or at exit for an engine never shut down
        self._remove_folder = weakref.finalize(self, shutil.rmtree, self._folder, ignore_errors=True)
        self._context = zmq.Context()
        self._results = self._context.socket(zmq.PULL)
        self._results_address = f"ipc://{self._folder}/results"
        self._results.bind(self._results_address)
        self._num_started = 0
        self._next_slice_id = 0
        self._workers = [self._start_worker() for _ in range(num_processes)]

    def _start_worker(self) -> _Worker:
        """A new process; it loads the tokenizer while the engine warms up (slices sent meanwhile wait)."""
        self._num_started += 1
        address = f"ipc://{self._folder}/slices-{self._num_started}"
        context = multiprocessing.get_context("spawn")  # no fork of the engine's threads
        process = context.Process(
            target=_serve,
            args=(self.spec, address, self._results_address, os.getpid()),
            name=f"wde-tokenize-{self._num_started}",
            daemon=True,
        )
        with _main_module_hidden():
            process.start()
        socket = self._context.socket(zmq.PUSH)
        socket.connect(address)  # connected: sends queue up until the process binds
        return _Worker(process, socket, {})

    def submit(self, inputs: Sequence[TokenizerInput]) -> Chunk:
        """Start encoding ``inputs``, one slice per process (at least ``MIN_SLICE`` inputs each), each to
        the process with the fewest unanswered slices."""
        inputs = list(inputs)
        pending = []
        for part in slices(inputs, self.num_processes):
            worker = min(self._workers, key=lambda w: len(w.pending))
            slice_id, self._next_slice_id = self._next_slice_id, self._next_slice_id + 1
            pending_slice = PendingSlice(self)
            worker.pending[slice_id] = pending_slice
            worker.socket.send_pyobj((slice_id, part), protocol=pickle.HIGHEST_PROTOCOL)
            pending.append(pending_slice)
        return Chunk(inputs, pending, unpack=PackedEncodings.unpack)

    def receive(self, timeout_ms: int) -> None:
        """Finish the slices whose answers have arrived (waiting up to ``timeout_ms`` for one); after a wait
        that brought none, fail the slices of a process that died and start another in its place."""
        if not self._results.poll(timeout_ms):
            if timeout_ms > 0:
                self._replace_dead_workers()
            return
        while True:
            try:
                slice_id, value, error = self._results.recv_pyobj(zmq.NOBLOCK)
            except zmq.Again:
                return
            failure = None if error is None else RuntimeError(f"a tokenizer process failed: {error}")
            for worker in self._workers:  # the one it went to (none: a replaced one's, already failed)
                if slice_id in worker.pending:
                    worker.pending.pop(slice_id).finish(value, failure)
                    break

    def _replace_dead_workers(self) -> None:
        for index, worker in enumerate(self._workers):
            if worker.process.is_alive():
                continue
            logger.warning(
                "tokenizer process %s exited (code %s) with %d slices unanswered; starting another",
                worker.process.name,
                worker.process.exitcode,
                len(worker.pending),
            )
            for pending_slice in worker.pending.values():
                pending_slice.finish(None, RuntimeError(f"tokenizer process {worker.process.name} died"))
            worker.socket.close(linger=0)
            self._workers[index] = self._start_worker()

    def shutdown(self) -> None:
        for worker in self._workers:
            with suppress(zmq.ZMQError):
                worker.socket.send_pyobj((-1, None), zmq.NOBLOCK)
        for worker in self._workers:
            worker.process.join(timeout=SHUTDOWN_WAIT_S)
            if worker.process.is_alive():
                worker.process.terminate()
            worker.socket.close(linger=0)
        self._results.close(linger=0)
        self._context.term()
        self._remove_folder()
