"""RequestPreparer (what an API worker does to the calls it sends the engine process): a bad call raises as
``LLMEngine.add_requests`` would, every other request comes back ready with its tokens, or failed alone
with the error the engine would have given it; token-id inputs are cut as the engine cuts them; one
tokenizer call per call."""

from __future__ import annotations

import pytest

from tests.unit.engine.conftest import CountingTokenizer, make_model_config
from wde.engine.errors import InputTooLongError
from wde.engine.request_preparer import RequestPreparer
from wde.inputs import PoolingParams
from wde.request import RequestStatus


def _preparer(max_model_len: int = 8) -> tuple[RequestPreparer, CountingTokenizer]:
    tokenizer = CountingTokenizer(max_model_len)
    return RequestPreparer(make_model_config(max_model_len), tokenizer), tokenizer  # type: ignore[arg-type]


def test_texts_come_back_ready_in_one_tokenizer_call() -> None:
    preparer, tokenizer = _preparer()
    requests = preparer.prepare(["a", "b"], ["one", "one two three"], PoolingParams())
    assert [request.ready for request in requests] == [True, True]
    assert [request.num_tokens for request in requests] == [3, 5]
    assert all(request.tokenize_span is not None for request in requests)
    assert tokenizer.num_encode_calls == 1


def test_an_input_too_long_with_truncation_off_fails_alone() -> None:
    preparer, _ = _preparer(max_model_len=4)
    short, long = preparer.prepare(["s", "l"], ["x", "x " * 20], PoolingParams(truncate=False))
    assert short.ready and short.status == RequestStatus.WAITING and short.num_tokens == 3
    assert long.status == RequestStatus.FAILED and isinstance(long.error, InputTooLongError)
    assert "more than max_model_len (4)" in str(long.error)


def test_token_ids_are_cut_without_the_tokenizer() -> None:
    preparer, tokenizer = _preparer(max_model_len=4)
    (request,) = preparer.prepare(["ids"], [{"prompt_token_ids": list(range(1, 11))}], PoolingParams())
    assert request.ready and request.truncated and list(request.token_ids) == [1, 2, 3, 4]
    assert tokenizer.num_encode_calls == 0


def test_a_bad_call_raises_as_add_requests_does() -> None:
    preparer, _ = _preparer()
    with pytest.raises(TypeError, match=r"inputs\[1\]: expected a str"):
        preparer.prepare(["a", "b"], ["fine", 3.5], PoolingParams())
    with pytest.raises(ValueError, match="lone UTF-16 surrogate"):
        preparer.prepare(["a"], ["a\ud800"], PoolingParams())
