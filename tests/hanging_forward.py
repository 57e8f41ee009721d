"""``HangingForward``: a model runner's forward that blocks on an event for any batch holding a marker
token, so tests can wedge the engine on purpose (the /health watchdog) and then let it go."""

from __future__ import annotations

import threading
from typing import Any

from wde.engine.llm_engine import LLMEngine

MARKER = "quartz"  # one wordpiece of the bundled model's vocabulary
MAX_HANG_SECONDS = 60.0  # a forgotten release still ends the test


class HangingForward:
    def __init__(self, engine: LLMEngine) -> None:
        (self.marker_id,) = engine.tokenizer.backend.encode(MARKER, add_special_tokens=False).ids
        self.original = engine.runner.execute_model
        self.release = threading.Event()
        self.hanging = threading.Event()  # set once a marked batch started waiting

    def __call__(self, batch: Any) -> list[Any]:
        if (batch.input_ids == self.marker_id).any():
            self.hanging.set()
            self.release.wait(MAX_HANG_SECONDS)
        return self.original(batch)

    @classmethod
    def install(cls, engine: LLMEngine) -> HangingForward:
        forward = cls(engine)
        engine.runner.execute_model = forward
        return forward
