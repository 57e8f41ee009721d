"""BusyClock: the batches' device seconds (from their events) over the wall seconds since the reset."""

from __future__ import annotations

from wde.worker.busy_clock import BusyClock


class FakeEvent:
    def __init__(self, at_ms: float) -> None:
        self.at_ms = at_ms
        self.synchronized = False

    def record(self) -> None:
        pass

    def synchronize(self) -> None:
        self.synchronized = True

    def elapsed_time(self, end_event: FakeEvent) -> float:
        return end_event.at_ms - self.at_ms


def test_busy_share_is_device_time_over_wall_time() -> None:
    now = [100.0]
    clock = BusyClock(clock=lambda: now[0])
    assert clock.share() == 0.0
    end = FakeEvent(250.0)
    clock.add(FakeEvent(0.0), end)  # 0.25 s busy
    clock.add(FakeEvent(1000.0), FakeEvent(1250.0))  # 0.25 s busy
    now[0] = 101.0  # one second of wall time
    assert end.synchronized
    assert clock.num_batches == 2
    assert abs(clock.share() - 0.5) < 1e-9
    clock.reset()
    now[0] = 102.0
    assert clock.share() == 0.0 and clock.num_batches == 0


def test_the_share_never_passes_one() -> None:
    now = [0.0]
    clock = BusyClock(clock=lambda: now[0])
    clock.add(FakeEvent(0.0), FakeEvent(5000.0))
    now[0] = 1.0
    assert clock.share() == 1.0
