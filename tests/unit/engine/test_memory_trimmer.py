"""MemoryTrimmer: trims only when idle after enough work, at most once per interval; glibc's trim runs."""

from __future__ import annotations

import sys
import time

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
    assert not trimmer.on_idle() and calls == []  # too little work since the last trim
    trimmer.note_tokens(1)
    assert trimmer.on_idle() and calls == [1] and trimmer.num_tokens_since_trim == 0
    trimmer.note_tokens(5000)
    clock.now += 4.9
    assert not trimmer.on_idle() and len(calls) == 1  # too soon after the last trim
    clock.now += 0.2
    assert trimmer.on_idle() and len(calls) == 2 and trimmer.num_trims == 2


def test_without_malloc_trim_it_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("wde.engine.memory_trimmer.glibc_malloc_trim", lambda: None)
    trimmer = MemoryTrimmer(min_tokens=1)
    trimmer.note_tokens(10)
    assert not trimmer.on_idle() and trimmer.num_trims == 0 and trimmer.num_tokens_since_trim == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim is Linux only")
def test_glibc_malloc_trim_runs() -> None:
    trim = glibc_malloc_trim()
    if trim is None:
        pytest.skip("this C library has no malloc_trim (not glibc)")
    assert trim() in (0, 1)  # 1: memory was released, 0: there was nothing to release
    trimmer = MemoryTrimmer(min_tokens=1)
    trimmer.note_tokens(1)
    assert trimmer.on_idle() and trimmer.num_trims == 1


def test_the_engine_thread_calls_on_idle_before_it_blocks() -> None:
    import asyncio

    from tests.server.fake_engine import FakeEngine
    from wde import EngineArgs
    from wde.engine.async_llm_engine import AsyncLLMEngine

    fake = FakeEngine()
    engine = AsyncLLMEngine(EngineArgs(), build_engine=lambda: fake)
    engine.start()
    try:
        engine.wait_until_ready(30)
        num_idle = fake.num_idle_calls
        assert len(asyncio.run(engine.encode(["a", "b"]))) == 2
        deadline = time.monotonic() + 30
        while fake.num_idle_calls <= num_idle:  # idle again after the step: on_idle before blocking
            assert time.monotonic() < deadline, "on_idle was not called after the work ran"
            time.sleep(0.01)
    finally:
        engine.shutdown(30)
