"""``PoisonedForward``: a model runner's forward that raises for any batch holding a marker token, so tests
can fail one input on purpose (batch isolation, over the engine and over HTTP)."""

from __future__ import annotations

from typing import Any

from wde.engine.llm_engine import LLMEngine

MARKER = "quartz"  # one wordpiece of the bundled model's vocabulary
INNOCENT_TEXTS = [f"sentence number {index} about cats and rivers" for index in range(30)]


class PoisonedForward:
    """Replaces ``engine.runner.execute_model`` (``install``); counts the forward passes it saw."""

    def __init__(self, engine: LLMEngine) -> None:
        ids = engine.tokenizer.backend.encode(MARKER, add_special_tokens=False).ids
        assert len(ids) == 1, f"{MARKER!r} is not one token of this vocabulary: {ids}"
        self.marker_id = ids[0]
        self.original = engine.runner.execute_model
        self.num_calls = 0

    def __call__(self, batch: Any) -> list[Any]:
        self.num_calls += 1
        if (batch.input_ids == self.marker_id).any():
            raise RuntimeError(f"poisoned token {self.marker_id} in the batch")
        return self.original(batch)

    @classmethod
    def install(cls, engine: LLMEngine) -> LLMEngine:
        engine.runner.execute_model = cls(engine)
        return engine
