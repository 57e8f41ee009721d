"""RequestProcessor without a model: one batched tokenizer call per window, token-id inputs cut to
max_model_len, over-long inputs with truncation off failed alone, a tokenizer refusal failed alone, and
the prompts."""

from __future__ import annotations

import threading
from concurrent.futures import Future

from tests.unit.engine.conftest import CountingTokenizer, make_model_config, text_request
from wde.engine.errors import InputTooLongError
from wde.engine.request_processor import RequestProcessor
from wde.engine.tokenizer_pool import MIN_SLICE, Chunk, TokenizerInput, TokenizerPool
from wde.inputs import PoolingParams
from wde.request import Request, RequestStatus
from wde.tokenizer import TextInput, TokenizedInput, Truncation


def _processor(max_model_len: int = 8) -> tuple[RequestProcessor, CountingTokenizer]:
    tokenizer = CountingTokenizer(max_model_len)
    return RequestProcessor(make_model_config(max_model_len), tokenizer), tokenizer  # type: ignore[arg-type]


def test_one_tokenizer_call_for_the_whole_window() -> None:
    processor, tokenizer = _processor()
    requests = [text_request(f"r{i}", i + 1) for i in range(5)]
    assert processor.process(requests) == 5
    assert tokenizer.num_encode_calls == 1
    assert [r.num_tokens for r in requests] == [3, 4, 5, 6, 7]
    assert processor.process(requests) == 0  # already tokenized: no second call
    assert tokenizer.num_encode_calls == 1


def test_truncation_on_cuts_and_off_fails_only_that_request() -> None:
    processor, _ = _processor(max_model_len=8)
    cut, refused, short = (
        text_request("cut", 20),
        text_request("refused", 20, truncate=False),
        text_request("s", 1),
    )
    processor.process([cut, refused, short])
    assert cut.num_tokens == 8 and cut.truncated and cut.token_ids[-1] == CountingTokenizer.SEP
    assert refused.status == RequestStatus.FAILED
    assert isinstance(refused.error, InputTooLongError)
    assert "22 tokens, more than max_model_len (8)" in str(refused.error)
    assert short.status == RequestStatus.WAITING and short.num_tokens == 3


def test_token_id_inputs_are_cut_to_max_model_len() -> None:
    processor, tokenizer = _processor(max_model_len=4)
    request = Request("ids", token_ids=list(range(1, 11)), token_type_ids=[0] * 10)
    assert processor.process([request]) == 0
    assert request.token_ids == [1, 2, 3, 4] and request.token_type_ids == [0, 0, 0, 0]
    assert request.truncated
    assert tokenizer.num_encode_calls == 0


class RefusingTokenizer(CountingTokenizer):
    """Refuses any batch holding the text "poison", as a tokenizer error on one input would."""

    def encode_batch(
        self, inputs: list[TextInput], truncation: Truncation | None = None
    ) -> list[TokenizedInput]:
        if "poison" in inputs:
            self.calls.append(list(inputs))
            raise TypeError("cannot tokenize")
        return super().encode_batch(inputs, truncation)


def test_a_refused_input_fails_alone() -> None:
    tokenizer = RefusingTokenizer(16)
    processor = RequestProcessor(make_model_config(16), tokenizer)  # type: ignore[arg-type]
    good, bad = Request("good", text="fine words"), Request("bad", text="poison")
    processor.process([good, bad])
    assert good.num_tokens == 4
    assert bad.status == RequestStatus.FAILED
    assert "the tokenizer refused this input" in str(bad.error)


def test_the_prompt_is_prepended_by_name_or_by_side() -> None:
    processor, tokenizer = _processor(max_model_len=16)
    named = Request("n", text="x", params=PoolingParams(prompt_name="query"))
    by_side = Request("s", text="y", params=PoolingParams(input_type="query"))
    plain = Request("p", text="z")
    processor.process([named, by_side, plain])
    assert tokenizer.calls == [["query: x", "query: y", "z"]]


class ThreadRecordingTokenizer(CountingTokenizer):
    """Records the thread of every batched call."""

    def __init__(self, max_length: int) -> None:
        super().__init__(max_length)
        self.threads: list[str] = []

    def encode_batch(
        self, inputs: list[TextInput], truncation: Truncation | None = None
    ) -> list[TokenizedInput]:
        self.threads.append(threading.current_thread().name)
        return super().encode_batch(inputs, truncation)


def _pooled(
    max_model_len: int = 16, num_workers: int = 2
) -> tuple[RequestProcessor, ThreadRecordingTokenizer]:
    tokenizer = ThreadRecordingTokenizer(max_model_len)
    pool = TokenizerPool(num_workers, tokenizer)  # type: ignore[arg-type]
    return RequestProcessor(make_model_config(max_model_len), tokenizer, pool), tokenizer  # type: ignore[arg-type]


def test_the_window_beyond_the_next_steps_is_tokenized_on_the_threads() -> None:
    processor, tokenizer = _pooled()
    requests = [text_request(f"r{i}", 2) for i in range(8)]
    # 1. nothing ready: the first half (what the next steps take) is tokenized before process returns, on
    #    the calling thread (few texts); the second half goes to the threads
    assert processor.process(requests) == 4
    assert all(r.ready and not r.tokenizing for r in requests[:4])
    assert all(r.ready or r.tokenizing for r in requests[4:])
    assert tokenizer.threads[0] == threading.current_thread().name
    # 2. the next call keeps the threads' results
    for _, chunk in list(processor._chunks):
        chunk.results()
    assert processor.process(requests[4:]) == 4
    assert all(r.ready and not r.tokenizing for r in requests)
    assert tokenizer.threads[1].startswith("wde-tokenize")
    # 3. the first half was scheduled: the window's new half is handed to the threads, not waited for
    window = [*requests[4:], *[text_request(f"n{i}", 3) for i in range(4)]]
    processor.process(window)
    ahead = window[4:]
    assert all(r.tokenizing or r.ready for r in ahead)
    for _, chunk in list(processor._chunks):
        chunk.results()
    assert processor.process(ahead) == 4
    assert [r.num_tokens for r in ahead] == [5] * 4
    assert sum(len(call) for call in tokenizer.calls) == 12  # each text once
    processor.shutdown()


def test_a_needed_request_in_flight_is_waited_for() -> None:
    processor, _ = _pooled()
    window = [text_request(f"r{i}", 1) for i in range(4)]
    for request in window:
        request.ready = True  # already scheduled-ready: the tail is prefetched
    tail = [text_request(f"t{i}", 2) for i in range(4)]
    processor.process([*window, *tail])
    assert all(r.tokenizing or r.ready for r in tail)
    # the head requests left (scheduled): the tail is now needed, and is waited for
    processor.process(tail)
    assert all(r.ready and r.num_tokens == 4 for r in tail)
    processor.shutdown()


def test_a_too_long_input_tokenized_on_a_thread_fails_alone() -> None:
    processor, _ = _pooled(max_model_len=8)
    requests = [text_request(f"r{i}", 2) for i in range(80)]
    requests[7] = text_request("long", 30, truncate=False)
    # the first half now: more than one slice's worth, so through the threads, waited for
    assert processor.process(requests) == 40
    assert requests[7].status == RequestStatus.FAILED and requests[7].ready
    assert "more than max_model_len (8)" in str(requests[7].error)
    for _, chunk in list(processor._chunks):
        chunk.results()
    assert processor.process(requests) == 40  # the second half, tokenized ahead
    assert all(r.num_tokens == 4 for i, r in enumerate(requests) if i != 7)
    processor.shutdown()


class BrokenPool:
    """A pool whose chunks fail, as a dead tokenizer process's do."""

    def submit(self, inputs: list[TokenizerInput]) -> Chunk:
        future: Future = Future()
        future.set_exception(RuntimeError("a tokenizer process died"))
        return Chunk(list(inputs), [future])

    def shutdown(self) -> None:
        pass


def test_a_broken_pool_s_chunk_is_tokenized_on_the_engine_thread() -> None:
    tokenizer = CountingTokenizer(16)
    processor = RequestProcessor(make_model_config(16), tokenizer, BrokenPool())  # type: ignore[arg-type]
    requests = [text_request(f"r{i}", 2) for i in range(2 * MIN_SLICE + 2)]
    # the first half waited for (its chunk failed: encoded here), the second half handed over ahead
    assert processor.process(requests) == MIN_SLICE + 1
    assert processor.process(requests[MIN_SLICE + 1 :]) == MIN_SLICE + 1  # that chunk failed too
    assert all(r.ready and r.num_tokens == 4 for r in requests)
