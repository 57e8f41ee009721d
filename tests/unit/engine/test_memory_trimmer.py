"""MemoryTrimmer: trims only when idle after enough work, at most once per interval; glibc's trim runs."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import pytest

from wde.engine.memory_trimmer import MemoryTrimmer, glibc_malloc_trim


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_trims_when_idle_after_enough_tokens_at_most_once_per_interval() -> None:
    calls: list[int] = []
    clock = FakeClock()
    trimmer = MemoryTrimmer(
        min_tokens=1000, min_interval_seconds=5.0, trim=lambda: calls.append(1) or 1, clock=clock
    )
    trimmer.note_tokens(999)
    assert trimmer.on_idle() is None and calls == []  # too little work since the last trim
    trimmer.note_tokens(1)
    assert trimmer.on_idle() is None and calls == [1] and trimmer.num_tokens_since_trim == 0
    trimmer.note_tokens(5000)
    clock.now += 4.0
    assert trimmer.on_idle() == pytest.approx(1.0) and len(calls) == 1  # too soon: deferred by 1 s
    clock.now += 1.0
    assert trimmer.on_idle() is None and len(calls) == 2 and trimmer.num_trims == 2


def test_without_malloc_trim_it_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("wde.engine.memory_trimmer.glibc_malloc_trim", lambda: None)
    trimmer = MemoryTrimmer(min_tokens=1)
    trimmer.note_tokens(10)
    assert trimmer.on_idle() is None and trimmer.num_trims == 0 and trimmer.num_tokens_since_trim == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim is Linux only")
def test_glibc_malloc_trim_runs() -> None:
    trim = glibc_malloc_trim()
    if trim is None:
        pytest.skip("this C library has no malloc_trim (not glibc)")
    assert trim() in (0, 1)  # 1: memory was released, 0: there was nothing to release
    trimmer = MemoryTrimmer(min_tokens=1)
    trimmer.note_tokens(1)
    assert trimmer.on_idle() is None and trimmer.num_trims == 1


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_the_engine_thread_calls_on_idle_before_it_blocks_and_again_when_asked() -> None:
    import asyncio

    from tests.server.fake_engine import FakeEngine
    from wde import EngineArgs
    from wde.entrypoints.async_llm_engine import AsyncLLMEngine

    fake = FakeEngine()
    engine = AsyncLLMEngine(EngineArgs(), build_engine=lambda: fake)
    engine.start()
    try:
        engine.wait_until_ready(30)
        # a deferred trim: on_idle asks to be called again in 10 ms, and is, with no command coming
        fake.idle_wait_seconds = 0.01
        assert len(asyncio.run(engine.encode(["a", "b"]))) == 2
        num_idle = fake.num_idle_calls
        wait_until(lambda: fake.num_idle_calls >= num_idle + 3, "on_idle to be called again")
        # nothing deferred: the thread blocks on its queue until the next command
        fake.idle_wait_seconds = None
        time.sleep(0.05)
        num_idle = fake.num_idle_calls
        time.sleep(0.2)
        assert fake.num_idle_calls == num_idle
        assert len(asyncio.run(engine.encode(["c"]))) == 1
        wait_until(lambda: fake.num_idle_calls > num_idle, "on_idle after the work ran")
    finally:
        engine.shutdown(30)
