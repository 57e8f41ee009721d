"""ForwardClock: zero between passes, the running time inside one, reset even when the pass raises."""

from __future__ import annotations

import threading
import time

import pytest

from wde.engine.forward_clock import ForwardClock


def test_zero_between_passes_and_growing_inside_one() -> None:
    clock = ForwardClock()
    assert clock.running_seconds() == 0.0
    with clock:
        time.sleep(0.02)
        assert clock.running_seconds() >= 0.015
    assert clock.running_seconds() == 0.0


def test_reset_when_the_pass_raises() -> None:
    clock = ForwardClock()
    with pytest.raises(RuntimeError), clock:
        raise RuntimeError("forward failed")
    assert clock.running_seconds() == 0.0


def test_readable_from_another_thread() -> None:
    clock = ForwardClock()
    seen: list[float] = []
    inside, done = threading.Event(), threading.Event()

    def forward() -> None:
        with clock:
            inside.set()
            done.wait(5)

    worker = threading.Thread(target=forward)
    worker.start()
    inside.wait(5)
    time.sleep(0.01)
    seen.append(clock.running_seconds())
    done.set()
    worker.join()
    assert seen[0] > 0.0
    assert clock.running_seconds() == 0.0
