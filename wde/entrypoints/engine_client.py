"""``EngineClient``: the seam ``AsyncLLMEngine`` drives an engine through. Two implementations:
``EngineThread`` (wde/entrypoints/engine_thread.py: the engine on a thread of this process) and
``RemoteEngineThread`` (server/engine_link/client.py: the engine in the engine process of
``wde serve --api-workers N``, reached over ZMQ; this process validates and tokenizes the calls it sends)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from wde.entrypoints.engine_thread import (
    Call,
    EngineCounts,
    EngineInfo,
    EngineState,
    Residency,
    StatsListener,
)


class RunningClock(Protocol):
    def running_seconds(self) -> float:
        """How long the forward pass running now has taken (0.0 when none runs)."""
        ...


class EngineClient(Protocol):
    state: EngineState
    info: EngineInfo | None  # the loaded engine's config, backend and tokenizer copy (None while loading)
    counts: EngineCounts  # queued and unfinished requests, as of the engine's latest step
    listeners: tuple[StatsListener, ...]  # replaced, never mutated
    residency: Residency | None  # an engine in another process: is its model loaded there (None: own)

    @property
    def forward_clock(self) -> RunningClock | None: ...

    def start(self) -> None:
        """Start loading (idempotent); returns at once."""
        ...

    def wait_until_ready(self, timeout: float | None = None) -> None: ...

    def wait_until_dead(self, timeout: float | None = None) -> bool: ...

    def stop(self, timeout: float | None = None) -> None:
        """Refuse new work, finish accepted work (up to ``timeout`` seconds)."""
        ...

    def unavailable_reason(self) -> str:
        """Why no work is taken now (for 503 answers); empty when ready."""
        ...

    def add(self, call: Call) -> None: ...

    def add_many(self, calls: Sequence[Call]) -> None:
        """Queue calls as one command (raises ``EngineUnavailableError`` when no work is taken now)."""
        ...

    def abort(self, request_ids: list[str]) -> None:
        """Never raises."""
        ...
