"""InputProcessor: every input checked before any becomes a request, errors naming the position and the
limit, no tokenization."""

from __future__ import annotations

import pytest

from tests.unit.engine.conftest import make_model_config
from wde.engine.errors import InputTooLongError
from wde.engine.input_processor import MAX_INPUT_CHARS, InputProcessor, describe
from wde.inputs import PoolingParams


def _processor(max_input_chars: int = MAX_INPUT_CHARS) -> InputProcessor:
    return InputProcessor(make_model_config(max_model_len=8), max_input_chars)


def test_texts_prompts_and_token_ids_become_requests() -> None:
    requests = _processor().process(
        ["a", "b", "c"],
        ["hello", {"prompt": "world"}, {"prompt_token_ids": [101, 7, 102], "token_type_ids": [0, 0, 0]}],
        PoolingParams(),
    )
    assert [r.request_id for r in requests] == ["a", "b", "c"]
    assert requests[0].text == "hello" and not requests[0].is_tokenized
    assert requests[1].text == "world"
    assert list(requests[2].token_ids) == [101, 7, 102] and requests[2].token_type_ids == [0, 0, 0]
    assert all(r.truncate for r in requests)


@pytest.mark.parametrize(
    ("prompt", "error", "match"),
    [
        (5, TypeError, r"inputs\[1\]: expected a str, .*got int"),
        (["a", "b"], TypeError, "nested lists are not inputs"),
        ({"prompt": 3}, TypeError, r"inputs\[1\]\.prompt: expected a str, got int"),
        ({"prompt_token_ids": []}, ValueError, "is empty"),
        ({"prompt_token_ids": [1, True]}, TypeError, r"prompt_token_ids\[1\]: expected an int"),
        ({"prompt_token_ids": [1, 40000]}, ValueError, r"outside the vocabulary \[0, 30522\)"),
        ({"prompt_token_ids": [1, -1]}, ValueError, r"\[1\]: token id -1 is outside the vocabulary"),
        ({"prompt_token_ids": [1, 2**70]}, ValueError, r"\[1\]: token id \d+ is outside"),
        (
            {"prompt_token_ids": [1, 2.0]},
            TypeError,
            r"prompt_token_ids\[1\]: expected an int token id, got float",
        ),
        (
            {"prompt_token_ids": [1, 2], "token_type_ids": [0, False]},
            TypeError,
            r"token_type_ids\[1\]: expected",
        ),
        ({"prompt_token_ids": [1, 2], "token_type_ids": [0]}, ValueError, "a list of 2 ints"),
        ({"prompt_token_ids": [1, 2], "token_type_ids": [0, 2]}, ValueError, r"outside \[0, 2\)"),
        ("\ud800x", ValueError, "lone UTF-16 surrogate"),
    ],
)
def test_a_bad_input_fails_the_call_naming_its_position(prompt: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        _processor().process(["ok", "bad"], ["fine", prompt], PoolingParams())


def test_the_character_limit_names_the_limit() -> None:
    with pytest.raises(ValueError, match="11 characters, more than the limit of 10"):
        _processor(max_input_chars=10).process(["a"], ["x" * 11], PoolingParams())


def test_over_long_token_ids_without_truncation_are_refused_up_front() -> None:
    with pytest.raises(InputTooLongError, match=r"9 tokens is more than max_model_len \(8\)"):
        _processor().process(["a"], [{"prompt_token_ids": list(range(9))}], PoolingParams(truncate=False))


def test_request_ids_must_match_inputs_and_truncate_must_be_bool() -> None:
    with pytest.raises(ValueError, match="got 1 request ids for 2 inputs"):
        _processor().process(["a"], ["x", "y"], PoolingParams())
    with pytest.raises(TypeError, match="truncate must be a bool"):
        _processor().process(["a"], ["x"], PoolingParams(truncate="yes"))  # type: ignore[arg-type]


def test_describe_names_what_came() -> None:
    assert describe(None) == "None"
    assert describe([1, 2]) == "a list of 2 items"
    assert describe({"b": 1, "a": 2}) == "a dict with keys ['a', 'b']"


def test_the_vocabulary_check_of_a_call_names_the_first_input_outside_it() -> None:
    # the range is checked over every input's ids at once; the error still names the input and the index
    prompts = [
        {"prompt_token_ids": [101, 7, 102]},
        {"prompt_token_ids": [5, 6]},
        {"prompt_token_ids": [9, 30522]},
    ]
    with pytest.raises(ValueError, match=r"inputs\[2\]\.prompt_token_ids\[1\]: token id 30522 is outside"):
        _processor().process(["a", "b", "c"], prompts, PoolingParams())
    requests = _processor().process(["a", "b"], prompts[:2], PoolingParams())
    assert [list(r.token_ids) for r in requests] == [[101, 7, 102], [5, 6]]
