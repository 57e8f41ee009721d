"""``ModelTurns``: --max-loaded-models in the engine process of ``wde serve --api-workers N``.

The API workers send every call to the engine process, whichever model it names, loaded or not. When the
models take turns (fewer slots than models), each call holds its model through the same ``ModelRegistry``
queue a single-process server's requests do (``ModelRegistry.hold``; the policy is
``server/served_models/swap_policy.py``): a call for a loaded model goes to its engine at once, one for an
unloaded model waits in the queue that decides which model loads next, and a model is unloaded only once the
calls holding it are answered. The registry's queue and swaps run on one event loop of their own (thread
"wde-model-turns"); with every model loaded at once, calls go straight from the input thread to their
engine and this loop does not exist.

A call is held from its hand-over until it is answered or aborted (``LinkedCall.release``, called by the
engine server's threads); a call aborted while it waits for its turn is never queued in an engine.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from server.served_models.model_registry import ModelRegistry
from wde.thread_names import name_os_thread

if TYPE_CHECKING:
    from server.engine_link.engine_process import LinkedCall

logger = logging.getLogger("wde.server")


class ModelTurns:
    def __init__(
        self,
        models: ModelRegistry,
        is_pending: Callable[[LinkedCall], bool],
        fail: Callable[[LinkedCall, BaseException], None],
    ) -> None:
        """``is_pending(call)``: not answered nor aborted yet; ``fail(call, error)``: answer it ``error``."""
        self.models = models
        self.is_pending = is_pending
        self.fail = fail
        self.loop = asyncio.new_event_loop()
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._run, name="wde-model-turns", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the loop (every worker has stopped: no call waits any more)."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5.0)

    def submit(self, model_index: int, calls: Sequence[LinkedCall]) -> None:
        """(any thread) Each call waits for its model's turn, then goes to its engine."""
        self.loop.call_soon_threadsafe(self._start_turns, model_index, calls)

    def _run(self) -> None:
        name_os_thread()
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _start_turns(self, model_index: int, calls: Sequence[LinkedCall]) -> None:
        for call in calls:
            task = self.loop.create_task(self._turn(model_index, call))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _turn(self, model_index: int, call: LinkedCall) -> None:
        model = self.models.models[model_index]
        released: asyncio.Future[None] = self.loop.create_future()

        def release() -> None:  # any thread: the call was answered or aborted
            self.loop.call_soon_threadsafe(_set_done, released)

        call.release = release
        try:
            async with self.models.hold(model):
                if not self.is_pending(call):
                    return  # aborted while it waited
                model.loaded_engine.submit_calls([call])
                await released
        except Exception as error:  # its model failed to load, or its engine takes no work
            self.fail(call, error)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
