"""An API worker of ``wde serve --api-workers N``: the whole HTTP app (routes, validation, JSON, the
result cache, tokenization for /tokenize and rerank's per-document cut) on the listening socket the parent
shares, over ``AsyncLLMEngine``s whose engine runs in the engine process (``RemoteEngineThread``).

It drains on SIGTERM as a single-process server does (``DrainingServer``) and exits 1 when the engine
process dies (``EngineMonitor``), so that the parent stops the others and reports it.
"""

from __future__ import annotations

import signal
import socket
import sys
from collections.abc import Sequence
from multiprocessing.connection import Connection
from types import FrameType

from server.app import create_app
from server.batches.batch_link import BatchLink
from server.engine_link.client import EngineLink
from server.engine_link.in_flight import InFlightSlots
from server.engine_link.linked_metrics import LinkedMetrics
from server.launch.draining_server import DrainingServer, exit_zero_on_signal, monitored_server
from server.observability.process_cpu import name_process
from server.process.heap_freeze import freeze_heap
from server.process.log_setup import configure_logging, skip_unused_record_fields
from server.process.memory_release import limit_malloc_arenas
from server.process.parent_death import end_with_parent
from server.served_models.model_registry import ModelRegistry, ServedModel
from server.settings import ServerSettings
from wde.config import EngineConfig
from wde.engine_args import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.output_precision import Calibration

HEAR_ENGINE_SECONDS = 10.0  # at most, before serving anyway (answering 503 until the engine's state comes)


class WorkerServer(DrainingServer):
    """Drains on SIGTERM only: the parent gets the terminal's SIGINT (sent to the whole process group) and
    passes it on as one SIGTERM, so that a second signal cannot cut the drain short."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGINT:
            super().handle_exit(sig, frame)


def main(
    index: int,
    name: str,
    sock: socket.socket,
    served: Sequence[tuple[EngineArgs, EngineConfig]],
    settings: ServerSettings,
    ipc_dir: str,
    log_level: str,
    graceful_timeout: float,
    slots: InFlightSlots,
    engine_alive: Connection,
    parent_pid: int | None = None,
) -> None:
    """The worker's entry point (``multiprocessing`` spawn target); exits 0 after a drain, 1 when the
    engine process died."""
    # 1. the process as `wde serve` sets it up
    name_process(f"api-{index}")
    limit_malloc_arenas()
    configure_logging(log_level)
    skip_unused_record_fields()
    if parent_pid is not None:
        end_with_parent(parent_pid)
    slots.index = index
    # 2. the models, each engine a remote one; the engine process's state heard before the first request
    #    (a worker that replaces a dead one serves at once, not 503 "loading" for its first 0.1 s)
    # each model's int8 / uint8 ranges, shared with the engine process (computed once per server)
    calibrations = [Calibration.from_file(engine_args.calibration_file) for engine_args, _ in served]
    link = EngineLink(name, ipc_dir, engine_alive, role=f"api-{index}", calibrations=calibrations)
    link.start()
    link.heard.wait(HEAR_ENGINE_SECONDS)
    index_of = {id(engine_args): model_index for model_index, (engine_args, _) in enumerate(served)}

    def make_engine(engine_args: EngineArgs) -> AsyncLLMEngine:
        model_index = index_of[id(engine_args)]
        return link.engine(model_index, engine_args, served[model_index][1])

    models = ModelRegistry(
        [ServedModel(engine_args, config=engine_config) for engine_args, engine_config in served],
        make_engine=make_engine,
        strict_names=settings.strict_model_name,
    )
    # 3. the app and uvicorn on the shared socket (worker 0 also on the Batch API's: batch_link.py)
    batch_link = BatchLink.of_worker(ipc_dir, index)
    sockets = [sock, batch_link.listen()] if batch_link.is_owner else [sock]
    app = create_app(
        models, settings, metrics=LinkedMetrics(link), in_flight_slots=slots, batch_link=batch_link
    )
    server, monitors = monitored_server(app, settings, log_level, graceful_timeout, WorkerServer)
    freeze_heap()  # the imports and the app, out of full collections (server/process/heap_freeze.py)
    exit_zero_on_signal()
    server.run(sockets=sockets)
    if batch_link.is_owner:
        batch_link.close(sockets[1])
    link.close()
    sys.exit(1 if any(monitor.stopped_server.is_set() for monitor in monitors) else 0)
