"""Model-free fixtures for engine tests: a fake tokenizer that counts its calls, and config factories."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from wde.config import ModelConfig, SchedulerConfig
from wde.engine.request_processor import RequestProcessor
from wde.engine.scheduler import Scheduler
from wde.request import Request
from wde.tokenizer import TextInput, TokenizedInput


class CountingTokenizer:
    """One token per whitespace-separated word plus [CLS]/[SEP]; records every batched call."""

    CLS, SEP = 101, 102

    def __init__(self, max_length: int) -> None:
        self.max_length = max_length
        self.calls: list[list[TextInput]] = []

    @property
    def num_encode_calls(self) -> int:
        return len(self.calls)

    def _ids(self, text: str) -> list[int]:
        return [1000 + len(word) for word in text.split()]

    def encode_batch(self, inputs: list[TextInput]) -> list[TokenizedInput]:
        self.calls.append(list(inputs))
        out = []
        for text in inputs:
            assert isinstance(text, str)
            ids = [self.CLS, *self._ids(text), self.SEP]
            truncated = len(ids) > self.max_length
            if truncated:
                ids = [*ids[: self.max_length - 1], self.SEP]
            out.append(TokenizedInput(ids, [0] * len(ids), truncated))
        return out

    def count_tokens(self, text: TextInput) -> int:
        return len(self._ids(text)) + 2


def make_model_config(max_model_len: int = 32, truncate: bool = True) -> ModelConfig:
    hf_config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": 30522,
        "hidden_size": 8,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
    }
    return ModelConfig(
        model="fake",
        tokenizer="fake",
        dtype="float32",
        architecture="BertModel",
        hf_config=hf_config,
        max_model_len=max_model_len,
        truncate=truncate,
        prompts={"query": "query: "},
    )


SchedulerFactory = Callable[..., tuple[Scheduler, CountingTokenizer]]


class ManualClock:
    """A monotonic clock the test moves by hand (the scheduler's priorities read time)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def make_scheduler() -> SchedulerFactory:
    def factory(
        max_num_batched_tokens: int = 64,
        max_num_seqs: int = 4,
        max_model_len: int = 32,
        is_padded: bool = False,
        max_num_lookahead: int = 0,
    ) -> tuple[Scheduler, CountingTokenizer]:
        model_config = make_model_config(max_model_len)
        tokenizer = CountingTokenizer(max_model_len)
        processor = RequestProcessor(model_config, tokenizer)  # type: ignore[arg-type]
        config = SchedulerConfig(max_num_batched_tokens, max_num_seqs, max_num_lookahead)
        config.verify()
        return Scheduler(config, processor, is_padded, clock=ManualClock()), tokenizer

    return factory


def text_request(request_id: str, num_words: int, truncate: bool = True) -> Request:
    """A request whose fake tokenization has num_words + 2 tokens."""
    return Request(request_id, text=" ".join(["word"] * num_words), truncate=truncate)
