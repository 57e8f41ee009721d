"""PairInputProcessor: (text_1, text_2) pairs, single texts and token ids; anything else named."""

from __future__ import annotations

import pytest

from tests.unit.engine.conftest import make_model_config
from wde.engine.pair_input_processor import PairInputProcessor
from wde.inputs import PoolingParams


def test_pairs_single_texts_and_token_ids() -> None:
    processor = PairInputProcessor(make_model_config())
    requests = processor.process(
        ["p", "t", "ids"],
        [("query", "document"), "one text", {"prompt_token_ids": [101, 102]}],
        PoolingParams(),
    )
    assert requests[0].text_pair == ("query", "document") and requests[0].text is None
    assert requests[1].text == "one text" and requests[1].text_pair is None
    assert list(requests[2].token_ids) == [101, 102]


@pytest.mark.parametrize(
    ("prompt", "error", "match"),
    [
        (("a", "b", "c"), TypeError, r"inputs\[0\]: a cross-encoder scores .* got a tuple of 3 items"),
        ({"query": "a"}, TypeError, "got a dict with keys"),
        (("a", 7), TypeError, r"inputs\[0\]\.text_2: expected a str, got int"),
    ],
)
def test_anything_else_is_refused_naming_the_field(prompt: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        PairInputProcessor(make_model_config()).process(["a"], [prompt], PoolingParams())


def test_each_side_of_a_pair_has_the_character_limit() -> None:
    with pytest.raises(ValueError, match=r"inputs\[0\]\.text_1: text has 6 characters"):
        PairInputProcessor(make_model_config(), max_input_chars=5).process(
            ["a"], [("x" * 6, "y")], PoolingParams()
        )
