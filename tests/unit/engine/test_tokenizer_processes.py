"""TokenizerProcesses: a chunk encoded in processes gives the engine thread's encodings (ids, type ids of
pairs, truncation, a refused input's error), as arrays; a process that dies fails its unanswered slices and
another takes its place; shutdown ends the processes cleanly."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from wde.engine.tokenizer_pool import MIN_SLICE, TokenizerInput, encode_inputs
from wde.engine.tokenizer_processes import PackedEncodings, TokenizerProcesses
from wde.engine_args import default_model_path
from wde.tokenizer import TokenizedInput, Tokenizer, Truncation

MAX_LENGTH = 16


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_pretrained(default_model_path(), MAX_LENGTH)


def _inputs() -> list[TokenizerInput]:
    texts: list[TokenizerInput] = [
        (f"text number {index} about files", None) for index in range(2 * MIN_SLICE)
    ]
    texts.append(("word " * 40, None))  # cut to MAX_LENGTH
    texts.append(("word " * 40, Truncation(8, "left")))  # cut to 8 from the left
    texts.append((("a query", "a document about it"), None))  # a pair: type ids
    return texts


def _as_lists(encodings: list) -> list:
    return [
        e
        if isinstance(e, Exception)
        else (
            list(map(int, e.token_ids)),
            None if e.token_type_ids is None else list(map(int, e.token_type_ids)),
            e.truncated,
        )
        for e in encodings
    ]


def test_processes_encode_as_the_engine_thread_does(tokenizer: Tokenizer) -> None:
    pool = TokenizerProcesses(2, tokenizer)
    try:
        inputs = _inputs()
        chunk = pool.submit(inputs)
        encodings, (start, end) = chunk.results()
        assert len(chunk.futures) == 2 and start <= end
        assert _as_lists(encodings) == _as_lists(encode_inputs(tokenizer, inputs))
        assert isinstance(encodings[0], TokenizedInput) and isinstance(encodings[0].token_ids, np.ndarray)
        assert encodings[-2].truncated and len(encodings[-2].token_ids) == 8  # type: ignore[union-attr]
    finally:
        pool.shutdown()


def test_pack_keeps_errors_and_type_ids_in_place() -> None:
    encodings = [
        TokenizedInput([101, 7, 102], None, False),
        ValueError("cannot tokenize"),
        TokenizedInput([101, 8, 102, 9, 102], [0, 0, 0, 1, 1], True),
    ]
    unpacked = PackedEncodings.pack(encodings).unpack()  # type: ignore[arg-type]
    assert isinstance(unpacked[1], ValueError) and str(unpacked[1]) == "cannot tokenize"
    assert _as_lists([unpacked[0], unpacked[2]]) == [
        ([101, 7, 102], None, False),
        ([101, 8, 102, 9, 102], [0, 0, 0, 1, 1], True),
    ]


def test_a_dead_process_fails_its_slices_and_another_takes_its_place(tokenizer: Tokenizer) -> None:
    pool = TokenizerProcesses(1, tokenizer)
    try:
        pool.submit(_inputs()[:2]).results()  # the process is up
        os.kill(pool._workers[0].process.pid, signal.SIGKILL)  # type: ignore[arg-type]
        pool._workers[0].process.join(timeout=10)
        chunk = pool.submit(_inputs()[:2])  # sent to the dead process: no answer comes
        with pytest.raises(RuntimeError, match="tokenizer process wde-tokenize-1 died"):
            chunk.results()
        encodings, _ = pool.submit(_inputs()[:2]).results()  # the new process answers
        assert _as_lists(encodings) == _as_lists(encode_inputs(tokenizer, _inputs()[:2]))
        assert pool._workers[0].process.name == "wde-tokenize-2"
    finally:
        pool.shutdown()


def test_shutdown_ends_the_processes_and_removes_the_socket_folder(tokenizer: Tokenizer) -> None:
    pool = TokenizerProcesses(2, tokenizer)
    pool.submit(_inputs()).results()
    processes, folder = [worker.process for worker in pool._workers], pool._folder
    pool.shutdown()
    assert all(process.exitcode == 0 for process in processes)
    assert not os.path.exists(folder)


def test_zero_processes_is_refused(tokenizer: Tokenizer) -> None:
    with pytest.raises(ValueError, match=r"tokenizer_processes \(0\) must be >= 1"):
        TokenizerProcesses(0, tokenizer)


def test_a_negative_tokenizer_processes_setting_is_refused_naming_it() -> None:
    from wde.config import SchedulerConfig

    SchedulerConfig(2048, 8, tokenizer_processes=0).verify()  # 0: tokenize in the engine's process
    with pytest.raises(ValueError, match=r"tokenizer_processes \(-1\) must be >= 0"):
        SchedulerConfig(2048, 8, tokenizer_processes=-1).verify()


def test_a_tokenizer_not_loaded_from_a_folder_is_refused_saying_so(tokenizer: Tokenizer) -> None:
    loose = Tokenizer(tokenizer.backend, MAX_LENGTH)  # built from a tokenizers object: no folder to load
    with pytest.raises(ValueError, match="need a tokenizer loaded from a model folder"):
        TokenizerProcesses(1, loose)
