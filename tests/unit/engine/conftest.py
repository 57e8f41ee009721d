"""Model-free fixtures for engine tests: a fake tokenizer that counts its calls, config factories, and
request, runner, engine and plan-submitter factories (a ``FakeRunner`` that raises on chosen requests, a
``FakeSubmitter`` that answers the task plans' submissions)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from wde.config import DeviceConfig, EngineConfig, ModelConfig, SchedulerConfig
from wde.engine.llm_engine import LLMEngine
from wde.engine.request_processor import RequestProcessor
from wde.engine.scheduler import Scheduler
from wde.engine.workflow import get_workflow
from wde.inputs import PoolingParams
from wde.outputs import EmbeddingOutput, ErrorOutput, RequestOutput, ScoreOutput
from wde.request import Request
from wde.tokenizer import TextInput, TokenizedInput, Truncation


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

    def encode_batch(
        self, inputs: list[TextInput], truncation: Truncation | None = None
    ) -> list[TokenizedInput]:
        self.calls.append(list(inputs))
        max_length = self.max_length if truncation is None else truncation.max_length
        keep_end = truncation is not None and truncation.direction == "left"
        out = []
        for text in inputs:
            if isinstance(text, str):
                ids = [self.CLS, *self._ids(text), self.SEP]
            else:  # a (text_1, text_2) pair: [CLS] text_1 [SEP] text_2 [SEP]
                ids = [self.CLS, *self._ids(text[0]), self.SEP, *self._ids(text[1]), self.SEP]
            truncated = len(ids) > max_length
            if truncated and keep_end:
                ids = [self.CLS, *ids[len(ids) - max_length + 1 :]]
            elif truncated:
                ids = [*ids[: max_length - 1], self.SEP]
            out.append(TokenizedInput(ids, [0] * len(ids), truncated))
        return out

    def count_tokens(self, text: TextInput) -> int:
        return len(self._ids(text)) + 2

    def untruncated(self) -> CountingTokenizer:
        """What the doors ask of an engine's tokenizer (an uncapped copy for /tokenize and chunking)."""
        return CountingTokenizer(max_length=10**9)


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


# ---- request, runner and engine factories (vLLM tests/v1/core/utils.py style) ------------------------------
def make_request(request_id: str, token_ids: list[int] | None = None, num_tokens: int = 4) -> Request:
    """A tokenized request: ``token_ids`` as given, else ``num_tokens`` ids [CLS, 1000, 1001, ..., SEP]."""
    if token_ids is None:
        token_ids = [CountingTokenizer.CLS, *range(1000, 1000 + num_tokens - 2), CountingTokenizer.SEP]
    return Request(request_id, token_ids=list(token_ids), token_type_ids=[0] * len(token_ids))


class FakeBackend:
    name = "fake"
    is_padded = False


class FakeRunner:
    """A model runner without a model: a request's output is the sum of its token ids (a float), so a test can
    check that every row got its own result. A batch that holds a poisoned request id raises, as a forward
    pass that one input breaks; ``fail_prepare`` makes batch building raise instead."""

    def __init__(self, poisoned: set[str] | None = None, fail_prepare: bool = False) -> None:
        self.poisoned = poisoned or set()
        self.fail_prepare = fail_prepare
        self.batches: list[list[str]] = []  # request ids of every forward pass tried, in order
        self.num_captures = 0
        self.attn_backend_cls = FakeBackend

    def prepare_inputs(self, requests: list[Request]) -> list[Request]:
        if self.fail_prepare and any(request.request_id in self.poisoned for request in requests):
            raise ValueError("cannot build this batch")
        return list(requests)

    def execute_model(self, batch: list[Request]) -> list[float]:
        self.batches.append([request.request_id for request in batch])
        bad = [request.request_id for request in batch if request.request_id in self.poisoned]
        if bad:
            raise RuntimeError(f"forward pass broken by {bad}")
        return [float(sum(request.token_ids if request.token_ids is not None else ())) for request in batch]

    def capture_while_idle(self, is_idle: Callable[[], bool]) -> int:
        self.num_captures += 1
        return 0

    def has_pending_captures(self) -> bool:
        return False


def make_engine_config(
    task: str = "embed", executor: str = "sync", max_num_batched_tokens: int = 64, max_num_seqs: int = 4
) -> EngineConfig:
    model_config = make_model_config()
    model_config.task = task
    scheduler_config = SchedulerConfig(max_num_batched_tokens, max_num_seqs)
    scheduler_config.verify()
    return EngineConfig(model_config, scheduler_config, DeviceConfig(device="cpu", executor=executor))


def make_engine(
    task: str = "embed", executor: str = "sync", runner: FakeRunner | None = None, **budget: int
) -> tuple[LLMEngine, FakeRunner, CountingTokenizer]:
    """An ``LLMEngine`` over the task's real workflow, a counting tokenizer and a ``FakeRunner``."""
    engine_config = make_engine_config(task, executor, **budget)
    tokenizer = CountingTokenizer(engine_config.model_config.max_model_len)
    runner = runner or FakeRunner()
    workflow = get_workflow(task)
    engine = LLMEngine(engine_config, workflow, tokenizer, runner, is_padded=False)  # type: ignore[arg-type]
    return engine, runner, tokenizer


def run_to_completion(engine: LLMEngine) -> dict[str, RequestOutput]:
    """Step until nothing is unfinished; every output by request id (each request answered once)."""
    outputs: dict[str, RequestOutput] = {}
    for _ in range(1000):
        if not engine.has_unfinished_requests():
            return outputs
        for output in engine.step():
            assert output.request_id not in outputs, f"{output.request_id} answered twice"
            outputs[output.request_id] = output
    raise AssertionError("the engine did not finish in 1000 steps")


class FakeSubmitter:
    """A plan's ``Submit`` target without an engine: a text's embedding is a fixed unit vector drawn from its
    hash (so equal texts embed equally), a pair's score is the length of its second text; every submission
    is recorded. ``fail_on`` fails that text with an input error, as the engine would."""

    def __init__(self, dimensions: int = 8, fail_on: str | None = None) -> None:
        self.dimensions = dimensions
        self.fail_on = fail_on
        self.submissions: list[tuple[list[Any], PoolingParams]] = []

    def vector(self, text: str) -> np.ndarray:
        rng = np.random.default_rng(abs(hash(text)) % 2**32)
        vector = rng.standard_normal(self.dimensions).astype(np.float32)  # [dimensions]
        return vector / np.linalg.norm(vector)

    def __call__(self, prompts: Sequence[Any], params: PoolingParams) -> list[RequestOutput]:
        self.submissions.append((list(prompts), params))
        outputs: list[RequestOutput] = []
        for index, prompt in enumerate(prompts):
            request_id = str(index)
            text = prompt["prompt"] if isinstance(prompt, dict) else prompt
            if text == self.fail_on:
                outputs.append(ErrorOutput(request_id, ValueError("refused by the fake engine")))
            elif isinstance(text, tuple):
                outputs.append(ScoreOutput(request_id, np.array([len(text[1])], np.float32), 3))
            else:
                outputs.append(EmbeddingOutput(request_id, self.vector(text), len(text.split()) + 2))
        return outputs
