"""``EngineMonitor``: the server's watch on its engine, on a thread of its own.

- A dead engine (its loop crashed) leaves this process nothing to serve. With --exit-on-engine-failure
  (the default) the monitor stops the server, which finishes its in-flight answers (the dead engine has
  failed them already: 503, no Retry-After) within --graceful-timeout, and ``wde serve`` exits 1 so that
  a supervisor (systemd, Kubernetes, docker --restart) starts a fresh process.
- A forward pass running longer than --max-batch-seconds looks wedged: /health answers 503 with the reason
  (``wedged_reason``), so a load balancer stops routing here; the monitor logs it once per wedged pass. A
  pass that ends after all makes the engine healthy again.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.engine_thread import EngineState
from wde.thread_names import name_os_thread

logger = logging.getLogger("wde.server")

MAX_CHECK_SECONDS = 5.0  # the wedge check runs at least this often (and at least twice per limit)


class Stoppable(Protocol):
    should_exit: bool  # uvicorn.Server's flag: set it to stop serving


def wedged_reason(engine: AsyncLLMEngine, max_batch_seconds: float) -> str:
    """Why the engine looks wedged ("" when it does not): its forward pass has run past the limit."""
    seconds = engine.running_forward_seconds
    if seconds <= max_batch_seconds:
        return ""
    return (
        f"a forward pass has run for {seconds:.0f} s, longer than --max-batch-seconds {max_batch_seconds:g}; "
        "the engine looks wedged"
    )


class EngineMonitor:
    def __init__(
        self, engine: AsyncLLMEngine, server: Stoppable, exit_on_failure: bool, max_batch_seconds: float
    ):
        self.engine = engine
        self.server = server
        self.exit_on_failure = exit_on_failure
        self.max_batch_seconds = max_batch_seconds
        self.stopped_server = threading.Event()  # set when the engine died and the monitor stopped the server
        self._thread = threading.Thread(target=self._watch, name="wde-engine-monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _watch(self) -> None:
        name_os_thread()
        try:
            self.engine.wait_until_ready()
        except Exception:  # failed to load or stopped while loading: serve() reports that itself
            return
        # 1. while it lives: watch the running forward pass
        interval = min(self.max_batch_seconds / 2, MAX_CHECK_SECONDS)
        wedged = False
        while not self.engine.wait_until_dead(interval):
            if self.engine.state == EngineState.STOPPED:
                return
            reason = wedged_reason(self.engine, self.max_batch_seconds)
            if reason and not wedged:
                logger.error("%s: /health answers 503 until it ends", reason)
            elif wedged and not reason:
                logger.warning("the wedged forward pass ended; /health answers 200 again")
            wedged = bool(reason)
        # 2. dead: stop serving, so that a supervisor restarts the process
        if not self.exit_on_failure:
            logger.error(
                "%s; staying up (--no-exit-on-engine-failure): every request gets 503 until a restart",
                self.engine.unavailable_reason,
            )
            return
        logger.error("%s; stopping the server (exit status 1) for a restart", self.engine.unavailable_reason)
        self.stopped_server.set()
        self.server.should_exit = True
