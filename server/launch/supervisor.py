"""``serve_with_workers``: ``wde serve --api-workers N``: one engine process, N API workers, this process
watching them.

    parent (this)  binds the port, starts the processes, forwards SIGTERM / SIGINT, restarts a dead worker
      ├─ engine process   the models and the device (server/engine_link/engine_process.py)
      └─ API worker × N   uvicorn + the app on the shared socket (server/launch/api_worker.py)

Shutdown keeps the single-process promises: the workers drain first (no new connections, every admitted
request answered within --graceful-timeout), then the engine process finishes whatever it still holds and
the parent exits 0. An engine process that dies (or fails to load a model) ends the server with exit 1 and
one line; a worker that dies is replaced, and the other workers' requests never notice.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from multiprocessing.connection import wait
from types import FrameType
from typing import Any

from server.engine_link import engine_process
from server.engine_link.in_flight import InFlightSlots
from server.launch import api_worker
from server.observability.process_cpu import name_process
from server.process.config_process import auto_api_workers, max_api_workers
from server.process.listener import StartupError, bind_listener, url_of
from server.served_models.model_registry import ModelRegistry
from server.settings import ServerSettings
from wde.config import EngineConfig
from wde.engine_args import EngineArgs
from wde.platforms.cores import usable_cores

logger = logging.getLogger("wde.server")

MAX_RESTARTS = 5  # worker restarts within RESTART_WINDOW seconds before the server gives up (exit 1)
RESTART_WINDOW = 60.0
ENGINE_FAILURE_SECONDS = 3.0  # a worker's exit 1 (its engine died) to the engine process's own end
ENGINE_STOP_SECONDS = 60.0  # the engine's own drain after the workers', before it is killed


def choose_api_workers(
    setting: int | str, served: Sequence[tuple[EngineArgs, EngineConfig]]
) -> tuple[int, str]:
    """(workers, why) for --api-workers: the number given, or auto's choice from the cores and device."""
    if setting != "auto":
        return int(setting), "--api-workers"
    on_gpu = any(config.device_config.device.startswith("cuda") for _, config in served)
    return auto_api_workers(usable_cores(), on_gpu)


class EngineStart:
    """The engine process of ``--api-workers``, started before the port is bound: it reads the models'
    configs first (reading a model folder imports torch and the families, which this process never holds)
    and sends them here, then waits for the word: serve at a URL, or end (the server runs in one process
    after all). What its children share is made before it starts (a spawned process inherits them): the
    link's folder, the admission slots (as many as the workers may be), the pipe the workers watch, the
    ready event."""

    def __init__(
        self, all_engine_args: Sequence[EngineArgs], settings: ServerSettings, log_level: str
    ) -> None:
        self.context = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads
        self.all_engine_args = list(all_engine_args)
        self.ipc_dir = tempfile.mkdtemp(prefix="wde-link-")
        self.slots = InFlightSlots(max_api_workers(settings.api_workers), self.context)
        self.alive, alive_write = self.context.Pipe(duplex=False)
        self.ready = self.context.Event()  # set by the engine process once every model is ready
        self._orders, orders = self.context.Pipe()
        self.process = self.context.Process(
            target=engine_process.main_reading_configs,
            args=(
                self.all_engine_args,
                settings,
                self.ipc_dir,
                log_level,
                self.slots,
                alive_write,
                orders,
                os.getpid(),
                self.ready,
            ),
            name="wde-engine",
        )
        self.process.start()
        alive_write.close()  # its end is the workers' EOF: only the engine process holds it
        orders.close()

    def configs(self) -> list[tuple[EngineArgs, EngineConfig]]:
        """Each model's config, as the engine process read it; raises what refused one (the process ends)."""
        try:
            kind, value = self._orders.recv()
        except EOFError:
            self.process.join()
            self.remove_folder()
            raise RuntimeError(
                f"the engine process ended (exit {self.process.exitcode}) while reading the models' configs"
            ) from None
        if kind == "error":
            self.end()
            raise value
        return list(zip(self.all_engine_args, value, strict=True))

    def serve(self, url: str) -> None:
        """The engine process loads its models and serves the workers."""
        self._orders.send(url)

    def end(self) -> None:
        """The engine process is not needed (a refused start, or one process serves): it ends."""
        if self.process.is_alive():
            with contextlib.suppress(OSError):
                self._orders.send(None)
            self.process.join(ENGINE_STOP_SECONDS)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()
        self.remove_folder()

    def remove_folder(self) -> None:
        shutil.rmtree(self.ipc_dir, ignore_errors=True)


def serve_with_workers(
    engine: EngineStart,
    served: Sequence[tuple[EngineArgs, EngineConfig]],
    settings: ServerSettings,
    host: str,
    port: int,
    graceful_timeout: float,
    log_level: str,
    num_workers: int,
    reason: str = "--api-workers",
) -> int:
    """``engine``: started, its configs read (``served``)."""
    # 1. what a single-process server checks first: names and memory, then the port
    try:
        ModelRegistry.from_configs(
            served, settings.max_loaded_models, strict_names=settings.strict_model_name
        )
        sock = bind_listener(host, port)
    except (ValueError, StartupError) as e:
        engine.end()
        raise StartupError(str(e)) from e
    name_process("supervisor")
    try:
        supervisor = Supervisor(engine, served, settings, sock, log_level, graceful_timeout, num_workers)
        return supervisor.run(reason)
    finally:
        sock.close()
        engine.remove_folder()


class Supervisor:
    def __init__(
        self,
        engine: EngineStart,
        served: Sequence[tuple[EngineArgs, EngineConfig]],
        settings: ServerSettings,
        sock: Any,
        log_level: str,
        graceful_timeout: float,
        num_workers: int,
    ) -> None:
        self.context = engine.context
        self.engine = engine.process
        self.engine_start = engine
        self.served = list(served)
        self.settings = settings
        self.sock = sock
        self.ipc_dir = engine.ipc_dir
        self.log_level = log_level
        self.graceful_timeout = graceful_timeout
        self.num_workers = num_workers
        self.slots = engine.slots
        self.alive = engine.alive  # the workers' end of the pipe only the engine process holds
        self.engine_ready = engine.ready
        self.workers: dict[int, Any] = {}
        self.generation = 0
        self.restarts: list[float] = []
        self.stop_signal: int | None = None

    def run(self, reason: str) -> int:
        # 1. the engine process (started, its configs read) loads the models
        self._install_signals()
        self.engine_start.serve(url_of(self.sock))
        # 2. the workers
        names = ", ".join(args.model or "the bundled model" for args, _ in self.served)
        logger.info(
            "listening on %s; loading %s (GET /health answers 503 until the ready line); %d API workers "
            "(%s) and the engine process (pid %d)",
            url_of(self.sock),
            names,
            self.num_workers,
            reason,
            self.engine.pid,
        )
        for index in range(self.num_workers):
            self._start_worker(index)
        # 3. watch until a signal, the engine's end or too many worker deaths
        return self._watch()

    def _install_signals(self) -> None:
        def stop(sig: int, frame: FrameType | None) -> None:
            self.stop_signal = sig

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop)

    def _start_worker(self, index: int) -> None:
        self.generation += 1
        process = self.context.Process(
            target=api_worker.main,
            args=(
                index,
                f"w{index}.{self.generation}",
                self.sock,
                self.served,
                self.settings,
                self.ipc_dir,
                self.log_level,
                self.graceful_timeout,
                self.slots,
                self.alive,
                os.getpid(),
            ),
            name=f"wde-api-{index}",
        )
        process.start()
        self.workers[index] = process

    def _watch(self) -> int:
        while True:
            if self.stop_signal is not None:
                return self._stop(self.stop_signal)
            sentinels = [self.engine.sentinel, *(process.sentinel for process in self.workers.values())]
            ready = wait(sentinels, timeout=0.2)
            if self.engine.sentinel in ready:
                return self._engine_ended()
            for index, process in list(self.workers.items()):
                died = process.sentinel in ready and self.stop_signal is None
                # a worker stops with 1 when the engine died: the engine process ends a moment later
                if died and process.exitcode == 1 and self._engine_ends_within(ENGINE_FAILURE_SECONDS):
                    return self._engine_ended()
                if died and not self._replace(index, process):
                    self._stop_workers()
                    self._stop_engine()
                    return 1

    def _engine_ends_within(self, seconds: float) -> bool:
        self.engine.join(seconds)
        return not self.engine.is_alive()

    def _replace(self, index: int, process: Any) -> bool:
        """Start a new worker in place of a dead one (False: too many deaths in a row: give up)."""
        process.join()
        self.slots.clear(index)
        now = time.monotonic()
        self.restarts = [when for when in self.restarts if now - when < RESTART_WINDOW] + [now]
        if len(self.restarts) > MAX_RESTARTS:
            logger.error(
                "API workers died %d times within %.0f s (the last: exit %s); stopping the server",
                len(self.restarts),
                RESTART_WINDOW,
                process.exitcode,
            )
            return False
        logger.warning(
            "API worker %d (pid %d) died with exit %s; starting another", index, process.pid, process.exitcode
        )
        self._start_worker(index)
        return True

    def _engine_ended(self) -> int:
        self.engine.join()
        code = self.engine.exitcode
        if self.stop_signal is None:
            when = "while serving" if self.engine_ready.is_set() else "before its models were ready"
            logger.error(
                "the engine process ended (exit %s) %s; stopping the API workers (exit status 1)",
                code if code is None or code >= 0 else f"signal {-code}",
                when,
            )
        self._stop_workers()
        return 1

    def _stop(self, sig: int) -> int:
        """Drain: the workers first (they answer what they admitted), then the engine."""
        logger.info("received %s: draining the API workers, then the engine", signal.Signals(sig).name)
        # this process's copy of the listening socket: once the workers' drains close theirs, no process
        # holds it and a new connection is refused at once (not queued in a backlog nobody accepts from)
        self.sock.close()
        self._stop_workers()
        return self._stop_engine()

    def _stop_workers(self) -> None:
        for process in self.workers.values():
            if process.is_alive():
                process.terminate()  # SIGTERM: each drains (DrainingServer)
        deadline = time.monotonic() + self.graceful_timeout + 15.0
        for process in self.workers.values():
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                logger.error("API worker pid %d did not drain in time; killing it", process.pid)
                process.kill()
                process.join()

    def _stop_engine(self) -> int:
        if self.engine.is_alive():
            self.engine.terminate()
            self.engine.join(ENGINE_STOP_SECONDS)
            if self.engine.is_alive():
                logger.error("the engine process did not stop within %.0f s; killing it", ENGINE_STOP_SECONDS)
                self.engine.kill()
                self.engine.join()
                return 1
        return 0 if self.engine.exitcode == 0 else 1
