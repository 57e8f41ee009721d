"""``plan_swap``: which model --max-loaded-models loads next, and which loaded one makes room for it.

Swaps go by queue, so that mixed traffic does not unload a model for every request of another:

1. A loaded model serves its own requests at once; requests for an unloaded model queue.
2. The unloaded model with the oldest queued request is the next to load.
3. It loads at once when there is room. Otherwise it waits for a loaded model to drain (no request has held
   it for ``drain_grace``: a batch answers its requests together, and their clients' next requests take a
   moment to come back; the least recently used drained model is unloaded), or for its oldest request to
   have waited ``max_wait`` (``--max-swap-wait``). Then the least recently used loaded model stops taking
   requests (new ones queue), finishes the ones it holds and unloads, unless it loaded less than its
   residency ago: as long as its load took, at least ``min_residency`` (``--min-model-residency``) and at
   most ``max_wait``. A model that just loaded serves the requests that waited for it first, so that those
   which aged during its load do not evict it at once (ping-pong), and loading takes at most about half
   of the time under mixed traffic while loads are shorter than the bounded wait. A model whose queued
   requests were just woken by its load is never chosen before they hold it: every load serves at least
   the requests queued for it.

The bound. With ``W`` = ``max_wait``, ``R`` = ``min_residency`` (<= ``W``), ``L`` = a model's load time,
``U`` = an unload (its engine thread stopped), ``D`` = the longest request in flight on the model that
yields (it is finished, never cut), and two models through one slot, a request for the unloaded model
waits at most

    max(W, S + min(max(R, L_other), W)) + D + U + L_own,  where S <= D + U + L_other

is what is left of a swap under way when the request arrives (0 when none is; a load is not cut short).
Arriving with no swap under way, the wait is at most ``W + D + U + L_own``: the bounded wait plus one load
(the other model's residency runs inside ``W``: it is at most ``W`` and began before the request came).
Arriving during the other model's swap, that model's residency is counted from the end of its load, so
the wait is at most ``W + D + U + L_own`` again when the swap and the residency fit in ``W``
(``D + U + L_other + max(R, L_other) <= W``), and otherwise is at most ``S + W + D + U + L_own``. With
more models, each model whose oldest queued request is older than this one's loads first and adds at most
its own ``L + W + D + U``.
``tests/server/served_models/test_swap_bound.py`` checks the formula on worst-case arrivals with a virtual
clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from server.settings import ServerSettings


class Swappable(Protocol):
    """What the plan reads of a ``ServedModel``."""

    waiting: deque[float]  # arrival times (monotonic) of the requests queued for it, oldest first
    num_in_use: int
    last_used: float
    loaded_at: float
    load_seconds: float  # how long its last load took
    idle_since: float  # when its last request in use let go of it

    @property
    def is_loaded(self) -> bool: ...


@dataclass(frozen=True)
class SwapTiming:
    max_wait: float = 2.0  # seconds the oldest queued request waits for the loaded models to drain
    min_residency: float = 1.0  # seconds a model stays loaded, with requests, before it can be made to yield
    drain_grace: float = 0.1  # seconds without a request in use before a loaded model counts as drained

    @classmethod
    def of(cls, settings: ServerSettings) -> SwapTiming:
        return cls(settings.max_swap_wait, settings.min_model_residency)

    def residency(self, load_seconds: float) -> float:
        """Seconds a model that loaded in ``load_seconds`` serves before a queued model can make it yield."""
        return min(max(self.min_residency, load_seconds), self.max_wait)

    def max_wait_bound(
        self, load_seconds: float, other_load_seconds: float, drain_seconds: float, unload_seconds: float
    ) -> float:
        """The longest a request for an unloaded model waits (two models, one slot: see the module)."""
        swap_under_way = drain_seconds + unload_seconds + other_load_seconds
        return (
            max(self.max_wait, swap_under_way + self.residency(other_load_seconds))
            + drain_seconds
            + unload_seconds
            + load_seconds
        )


@dataclass(frozen=True)
class SwapPlan:
    model: Swappable  # to load
    victim: Swappable | None  # to unload first (None: there is room)
    reason: str = "room"  # room / drained / waited (for the log)


def plan_swap(
    models: Sequence[Swappable], max_loaded: int, timing: SwapTiming, now: float
) -> tuple[SwapPlan | None, float | None]:
    """The swap due ``now`` (None when none is), and else the monotonic time at which one may become due
    with no other change (None: only a change can make one due)."""
    # 1. the next model: the unloaded one with the oldest queued request
    queued = [model for model in models if model.waiting and not model.is_loaded]
    if not queued:
        return None, None
    model = min(queued, key=lambda queued_model: queued_model.waiting[0])
    # 2. room: load at once
    loaded = [other for other in models if other.is_loaded]
    if len(loaded) < max_loaded:
        return SwapPlan(model, None), None
    # 3. a drained model makes room at once, the least recently used first
    idle = [other for other in loaded if other.num_in_use == 0 and not other.waiting]
    drained = [other for other in idle if now >= other.idle_since + timing.drain_grace]
    if drained:
        return SwapPlan(model, min(drained, key=lambda other: other.last_used), "drained"), None
    # 4. else the bounded wait, and the residency of the model that would yield; a loaded model with queued
    #    requests has just loaded and they are being woken: they hold it first (their wake-up is a change)
    yieldable = [other for other in loaded if not other.waiting]
    if not yieldable:
        return None, None
    forced_at = model.waiting[0] + timing.max_wait
    due, victim = min(
        (
            (max(forced_at, other.loaded_at + timing.residency(other.load_seconds)), other)
            for other in yieldable
        ),
        key=lambda item: (item[0], item[1].last_used),
    )
    if now >= due:
        return SwapPlan(model, victim, f"waited {now - model.waiting[0]:.1f} s"), None
    return None, min([due, *(other.idle_since + timing.drain_grace for other in idle)])
