"""RequestProcessor without a model: one batched tokenizer call per window, token-id inputs cut to
max_model_len, over-long inputs with truncation off failed alone, a tokenizer refusal failed alone, and
the prompts."""

from __future__ import annotations

from tests.unit.engine.conftest import CountingTokenizer, make_model_config, text_request
from wde.engine.errors import InputTooLongError
from wde.engine.request_processor import RequestProcessor
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
