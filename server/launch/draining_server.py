"""``DrainingServer``: uvicorn, draining on SIGTERM / SIGINT; ``serve()`` runs the app with it.

On a signal: new requests get 503 (``AppState.draining``), uvicorn stops accepting connections and waits
for in-flight requests (up to --graceful-timeout; those still running then are answered 503 and counted in
one log line), then the app's lifespan drains and stops the engine, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
from collections.abc import Sequence
from types import FrameType

import uvicorn
from fastapi import FastAPI

from server.app import create_app
from server.app_state import AppState
from server.launch.startup_log import QuietStartupErrors
from server.launch.uvicorn_options import uvicorn_options
from server.observability.engine_monitor import EngineMonitor
from server.process.listener import StartupError, bind_listener, url_of
from server.process.ready_line import log_ready
from server.served_models.model_registry import ModelRegistry, ServedModel
from server.served_models.swap_policy import SwapTiming
from server.settings import ServerSettings
from wde.config import EngineConfig
from wde.engine_args import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

logger = logging.getLogger("wde.server")

CUTOFF_ANSWER_TIMEOUT = 5.0  # seconds for cancelled requests to send their 503 before the loop ends


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: AppState) -> None:
        super().__init__(config)
        self.state = state

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        with QuietStartupErrors.installed():  # a failed lifespan: one line from `wde serve`, not a traceback
            try:
                await super().startup(sockets)
            except SystemExit:  # uvicorn's exit(3) when the lifespan failed: `serve` says it in one line
                self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.state.begin_drain()
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        # the requests cancelled at --graceful-timeout answer 503 as they unwind: let them finish first
        if self.server_state.tasks:
            await asyncio.wait(list(self.server_state.tasks), timeout=CUTOFF_ANSWER_TIMEOUT)
        if self.state.num_cut_off:
            logger.warning(
                "%d request(s) still running after --graceful-timeout %g s were answered 503; raise the flag "
                "to let them finish",
                self.state.num_cut_off,
                self.config.timeout_graceful_shutdown,
            )


def serve(
    served: Sequence[tuple[EngineArgs, EngineConfig]],
    settings: ServerSettings,
    host: str,
    port: int,
    graceful_timeout: float,
    log_level: str,
    api_workers_reason: str = "--api-workers 1",
) -> int:
    """Serve the models of ``served`` (each one's EngineArgs and the config built from them, once: the
    engines are made from it) until a signal (exit 0) or a model that failed to load at start-up (exit 1);
    ``StartupError`` (exit 2) when the port cannot be bound, before anything loads, or when the app's
    lifespan fails."""
    # 1. the port first: a busy port fails in one line, not after the model loaded
    all_engine_args = [engine_args for engine_args, _ in served]
    try:  # names, and whether the models fit in memory together
        models = ModelRegistry.from_configs(
            served,
            settings.max_loaded_models,
            strict_names=settings.strict_model_name,
            swap_timing=SwapTiming.of(settings),
            freeze_heap=True,  # this process serves, and only serves: server/process/heap_freeze.py
        )
    except ValueError as e:
        raise StartupError(str(e)) from e
    sock = bind_listener(host, port)
    # 2. the app over the models; its engines start (loading on their threads) below
    app = create_app(models, settings)
    server, monitors = monitored_server(app, settings, log_level, graceful_timeout)
    logger.info(
        "listening on %s; loading %s (GET /health answers 503 until the ready line); one process for HTTP "
        "and the engine (%s)",
        url_of(sock),
        ", ".join(args.model or "the bundled model" for args in all_engine_args),
        api_workers_reason,
    )
    models.start()
    # 3. one "ready" line per model once its engine is up; stop the server if one cannot load
    load_failed = threading.Event()
    for model in models.loaded():
        threading.Thread(
            target=_report_engine,
            args=(model.engine, settings, server, load_failed, url_of(sock)),
            name="wde-load",
            daemon=True,
        ).start()
    # 4. uvicorn on the bound socket, with signals drained gracefully
    exit_zero_on_signal()
    server.run(sockets=[sock])
    if not server.started:  # the app's lifespan failed (it stopped the engines): one line, exit 2
        raise StartupError(app.state.startup_error or "the server did not start (--log-level debug says why)")
    stopped = any(monitor.stopped_server.is_set() for monitor in monitors)
    return 1 if load_failed.is_set() or stopped else 0


def monitored_server(
    app: FastAPI,
    settings: ServerSettings,
    log_level: str,
    graceful_timeout: float,
    server_cls: type[DrainingServer] = DrainingServer,
) -> tuple[DrainingServer, list[EngineMonitor]]:
    """uvicorn over ``app`` as ``wde serve`` runs it (one process, or an API worker), and the monitors of
    the engines its models make: a dead engine stops the server (exit 1, for a supervisor), a wedged
    forward pass is logged; every engine is watched, those --max-loaded-models loads later too."""
    config = uvicorn.Config(
        app,
        log_level=log_level,
        # uvicorn waits float seconds (asyncio.wait_for); its annotation says int
        timeout_graceful_shutdown=graceful_timeout,  # type: ignore[arg-type]
        access_log=False,  # server/observability/access_log.py logs one line per request instead
        log_config=None,  # uvicorn's own lines in the format `wde serve` configured
        **uvicorn_options(settings),
    )
    server = server_cls(config, app.state.wde)
    monitors: list[EngineMonitor] = []

    def watch(model: ServedModel, engine: AsyncLLMEngine) -> None:
        monitor = EngineMonitor(engine, server, settings.exit_on_engine_failure, settings.max_batch_seconds)
        monitors.append(monitor)
        monitor.start()

    app.state.wde.models.add_engine_hook(watch)
    return server, monitors


def _report_engine(
    engine: AsyncLLMEngine,
    settings: ServerSettings,
    server: DrainingServer,
    load_failed: threading.Event,
    url: str,
) -> None:
    try:
        engine.wait_until_ready()
    except Exception as e:
        logger.error("the model failed to load, stopping the server: %s", e)
        load_failed.set()
        server.should_exit = True
        return
    if not engine.is_ready:  # stopped while loading
        return
    log_ready(engine, settings, url)


def exit_zero_on_signal() -> None:
    """uvicorn re-raises the signal it drained on, to the handler it found installed; make that handler
    end the process with status 0 (the drain was graceful). A signal before uvicorn starts exits 0 too."""

    def exit_zero(sig: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, exit_zero)
