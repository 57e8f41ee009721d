"""``CountedForward``: wraps a model runner's ``execute_model`` and keeps the sequences of each forward pass
the model really ran (the result cache's tests count them)."""

from __future__ import annotations

from typing import Any

from wde.engine.llm_engine import LLMEngine


class CountedForward:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.original = engine.runner.execute_model
        self.batch_sizes: list[int] = []  # sequences per forward pass, in order
        engine.runner.execute_model = self

    def __call__(self, batch: Any) -> Any:
        self.batch_sizes.append(len(batch.request_ids))
        return self.original(batch)

    def reset(self) -> None:
        self.batch_sizes.clear()

    def uninstall(self) -> None:
        self.engine.runner.execute_model = self.original
