"""``Tokenizer.encode_batch(..., Truncation(length, direction))`` cuts as transformers' tokenizer does with
``truncation_side`` and ``max_length`` (texts and pairs), and keeps a bounded number of tokenizer copies;
the RequestProcessor tokenizes a window holding both directions with one call per truncation."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from wde.engine_args import default_model_path
from wde.tokenizer import MAX_SERIAL_INPUTS, MAX_TRUNCATION_VARIANTS, Tokenizer, Truncation

MAX_MODEL_LEN = 32
TEXT = "the start of the text " + "middle words " * 40 + "and the distinct ending"
PAIR = ("a short query about the ending", TEXT)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_pretrained(default_model_path(), MAX_MODEL_LEN)


@pytest.mark.parametrize("direction", ["right", "left"])
@pytest.mark.parametrize("max_length", [MAX_MODEL_LEN, 12])
def test_truncation_equals_transformers(tokenizer: Tokenizer, direction: str, max_length: int) -> None:
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(default_model_path(), truncation_side=direction)
    text, pair = tokenizer.encode_batch([TEXT, PAIR], Truncation(max_length, direction))
    expected_text = reference(TEXT, truncation=True, max_length=max_length)
    expected_pair = reference(*PAIR, truncation=True, max_length=max_length)
    assert text.token_ids == expected_text["input_ids"] and text.truncated
    assert (
        pair.token_ids == expected_pair["input_ids"]
        and pair.token_type_ids == expected_pair["token_type_ids"]
    )
    if direction == "left":  # the end is kept
        assert reference.decode(text.token_ids[-4:-1]) == "the distinct ending"


def test_the_default_truncation_is_the_engines_own(tokenizer: Tokenizer) -> None:
    default = tokenizer.encode_batch([TEXT])[0]
    assert tokenizer.encode_batch([TEXT], Truncation(MAX_MODEL_LEN))[0].token_ids == default.token_ids
    assert len(default.token_ids) == MAX_MODEL_LEN


def test_copies_are_bounded(tokenizer: Tokenizer) -> None:
    for max_length in range(4, 4 + 2 * MAX_TRUNCATION_VARIANTS):
        assert len(tokenizer.encode_batch([TEXT], Truncation(max_length, "left"))[0].token_ids) == max_length
    assert len(tokenizer._variants) == MAX_TRUNCATION_VARIANTS


def test_an_unknown_direction_is_refused(tokenizer: Tokenizer) -> None:
    with pytest.raises(ValueError, match="'middle' is not one of"):
        tokenizer.encode_batch([TEXT], Truncation(8, "middle"))


def test_a_window_of_both_directions(tokenizer: Tokenizer) -> None:
    from tests.unit.engine.conftest import make_model_config
    from wde.engine.request_processor import RequestProcessor
    from wde.inputs import PoolingParams
    from wde.request import Request

    processor = RequestProcessor(make_model_config(MAX_MODEL_LEN), tokenizer)
    right, left, short = (
        Request("r", text=TEXT),
        Request("l", text=TEXT, params=PoolingParams(truncation_direction="left")),
        Request("s", text=TEXT, params=PoolingParams(max_input_tokens=10)),
    )
    calls_before = tokenizer.num_encode_calls
    processor.process([right, left, short])
    assert tokenizer.num_encode_calls - calls_before == 3  # one batched call per truncation asked
    assert right.token_ids == tokenizer.encode_batch([TEXT])[0].token_ids
    assert left.token_ids == tokenizer.encode_batch([TEXT], Truncation(MAX_MODEL_LEN, "left"))[0].token_ids
    assert short.token_ids is not None and len(short.token_ids) == 10 and short.truncated


@pytest.mark.parametrize(("text", "cut"), [(TEXT, True), ("four words of text", False)])
def test_a_cut_is_seen_when_tokenizers_reports_no_overflow(
    tokenizer: Tokenizer, text: str, cut: bool
) -> None:
    """tokenizers 0.23.2 leaves ``overflowing`` empty for some truncated byte-level BPE inputs: an encoding
    as long as the limit is then counted again. A text of exactly the limit is not called cut."""
    max_length = len(tokenizer.untruncated().encode("four words of text").ids)
    ids = tokenizer.encode_batch([text], Truncation(max_length))[0].token_ids
    assert len(ids) == max_length
    unreported = SimpleNamespace(ids=ids, type_ids=[0] * len(ids), overflowing=[])
    assert tokenizer._was_truncated(unreported, text, max_length) is cut
    assert tokenizer._was_truncated(SimpleNamespace(ids=ids[:-1], overflowing=[]), text, max_length) is False


def test_a_few_texts_encoded_one_by_one_equal_the_batched_call(tokenizer: Tokenizer) -> None:
    """Up to MAX_SERIAL_INPUTS texts skip tokenizers' thread pool; the encodings are the same, and a single
    text carries no type-id list (all segment 0) while a pair does."""
    inputs = [TEXT, PAIR, "short", ("q", "d")]
    assert len(inputs) <= MAX_SERIAL_INPUTS
    serial = tokenizer.encode_batch(inputs)
    batched = tokenizer.encode_batch(inputs * 3)[: len(inputs)]  # over the limit: one batched call
    for one, other in zip(serial, batched, strict=True):
        assert (one.token_ids, one.token_type_ids, one.truncated) == (
            other.token_ids,
            other.token_type_ids,
            other.truncated,
        )
    assert serial[0].token_type_ids is None and serial[2].token_type_ids is None
    assert serial[1].token_type_ids is not None and 1 in serial[1].token_type_ids
    assert serial[0].truncated and not serial[2].truncated
