"""A stand-in for ``LLMEngine`` with the same loop interface and no model: each ``step`` answers every
queued request once the test opens ``gate``; prompts starting with "too long" fail like over-long input."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import numpy as np
import tokenizers
from tokenizers.models import WordLevel

from wde.engine.errors import InputTooLongError
from wde.engine.forward_clock import ForwardClock
from wde.engine.stats import BatchStats, StepStats
from wde.outputs import EmbeddingOutput, ErrorOutput, RequestOutput

GATE_TIMEOUT = 30.0


class FakeEngine:
    def __init__(self) -> None:
        self.queued: dict[str, str] = {}
        self.gate = threading.Event()
        self.gate.set()
        self.stepping = threading.Event()  # set when a step starts (requests are "running")
        self.step_error: Exception | None = None
        self.max_per_step = 1_000_000  # requests answered by one step, first come first served
        self.num_steps = 0
        self.is_shut_down = False
        self.num_waiting = 0
        self.last_step_stats: StepStats | None = None
        backend = tokenizers.Tokenizer(WordLevel({"[UNK]": 0}, "[UNK]"))
        self.tokenizer = SimpleNamespace(backend=backend, untruncated=lambda: backend)
        self.runner = SimpleNamespace(attn_backend_cls=SimpleNamespace(name="fake"))
        model_config = SimpleNamespace(
            task="embed",
            architecture="FakeModel",
            model="fake",
            served_model_name=None,
            outputs=("dense",),
            has_dense_output=True,
            long_input="truncate",
            long_input_overlap=0,
            # what the int8 / uint8 calibration at load reads (a server's engine: calibration_at_load.py)
            prompts={},
            default_prompt_name=None,
            task_adapters=None,
            multi_vector=None,
            pooling=SimpleNamespace(normalize=True),
        )
        self.model_config = model_config
        self.engine_config = SimpleNamespace(model_config=model_config)
        self.forward_clock = ForwardClock()
        self.num_idle_calls = 0  # on_idle() calls: the engine thread went idle
        self.idle_wait_seconds: float | None = None  # on_idle's answer: call me again after that long

    def add_requests(
        self, request_ids: list[str], prompts: list[Any], params: Any, arrival_time: float | None = None
    ) -> None:
        for index, prompt in enumerate(prompts):
            if not isinstance(prompt, str):
                raise TypeError(f"inputs[{index}]: expected a str, got {type(prompt).__name__}")
        self.queued.update(zip(request_ids, prompts, strict=True))
        self.num_waiting = len(self.queued)

    def abort_request(self, request_id: str) -> bool:
        found = self.queued.pop(request_id, None) is not None
        self.num_waiting = len(self.queued)
        return found

    def has_unfinished_requests(self) -> bool:
        return bool(self.queued)

    def get_num_unfinished_requests(self) -> int:
        return len(self.queued)

    def has_pending_captures(self) -> bool:
        return False

    def hold_seconds(self) -> float | None:
        return None  # one priority: nothing is ever held off

    def on_idle(self) -> float | None:
        self.num_idle_calls += 1
        return self.idle_wait_seconds

    def step(self) -> list[RequestOutput]:
        self.num_steps += 1
        self.stepping.set()
        if not self.gate.wait(GATE_TIMEOUT):
            raise TimeoutError("the test never opened the gate")
        if self.step_error is not None:
            raise self.step_error
        batch = dict(list(self.queued.items())[: self.max_per_step])
        for request_id in batch:
            del self.queued[request_id]
        self.num_waiting = len(self.queued)
        outputs: list[RequestOutput] = []
        for request_id, prompt in batch.items():
            if prompt.startswith("too long"):
                outputs.append(ErrorOutput(request_id, InputTooLongError("input has 999 tokens")))
            else:
                outputs.append(EmbeddingOutput(request_id, np.full(4, len(prompt), np.float32), len(prompt)))
        num_tokens = sum(len(prompt) for prompt in batch.values())
        batch_stats = [BatchStats(len(batch), num_tokens, 0.01, device_seconds=0.004)]
        self.last_step_stats = StepStats(
            len(self.queued), len(batch), num_tokens, len(batch), 0.001, batch_stats
        )
        return outputs

    def shutdown(self) -> None:
        self.is_shut_down = True
