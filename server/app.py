"""``create_app(models, settings)``: the FastAPI application over the served models' ``AsyncLLMEngine``s.

Adding a route group (the rerank routes ``/rerank``, ``/v1/rerank``, ``/v2/rerank`` come this way):
  1. request / response models in the API family's module of ``server/protocols/`` (``tei.py``,
     ``openai.py``, ``cohere.py``, ``vllm.py``, ``infinity.py``, ``batch.py``; requests subclass
     ``server/protocols/common.py``'s ``RequestModel``, so unknown fields are ignored and named in a response
     header, or 422 under --strict-request-fields; inputs reuse ``Inputs`` / ``parse_inputs`` or their own
     validator);
  2. ``server/routes/rerank.py`` with ``router = APIRouter()``; a handler takes its request model and the
     ``Request``, calls ``state = get_state(request)`` and ``state.check_num_inputs(...)``, holds the model
     the request names for as long as it uses its engine (``async with state.models.use(body.model, SCORE)
     as model:``: 404 for a model not served, loads one that --max-loaded-models unloaded, picks the first
     model of the route's task for ``model: null``), calls ``await held_engine(model).rerank(...)`` inside
     that block, reports what it served (``record_usage(request.state, num_inputs, num_tokens)``, for the
     access log) and returns ``ORJSONResponse(...)``;
  3. the module added to ``ROUTE_MODULES`` below (a route outside ``/v1/*`` and ``/v2/*`` that is not TEI's:
     its path in ``server/doors.py``).
Routes import what is below them (``tests/unit/test_layering.py``'s ``SERVER_FLOORS``), never the launchers
(``server/launch/``). Handlers only raise; a new exception type (``server/errors.py``) gets its status in
``server/error_answers.py``'s ``ERROR_TABLE`` (and in ``TEI_ERROR_TABLE`` / ``COHERE_ERROR_TABLE`` where TEI /
Cohere answer it differently; ``server/doors.py`` says which routes are TEI's and Cohere's: ``/v1/*`` paths
get OpenAI's error shape and statuses automatically). Auth, admission (429/503), the payload limit (413),
metrics by route and the abort of a disconnected client's requests apply without any change
(``server/middleware/request_pipeline.py``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

import wde
from server.app_state import AppState
from server.batches.batch_link import BatchLink
from server.batches.service import BatchService
from server.direct_routes import DirectRoutes
from server.engine_link.in_flight import InFlightSlots
from server.error_answers import install_error_handlers
from server.middleware.request_pipeline import RequestPipeline
from server.observability.request_trace import record_call
from server.observability.tracing import Tracing
from server.openapi import install_openapi
from server.responses import ORJSONResponse
from server.routes import (
    batches,
    classify,
    cohere_embed,
    compat,
    decode,
    embed,
    embed_all,
    embed_sparse,
    embeddings,
    files,
    info,
    metrics,
    openai,
    pooling,
    predict,
    rerank,
    score,
    similarity,
    tokenize,
)
from server.served_models.model_registry import ModelRegistry
from server.served_models.swap_policy import SwapTiming
from server.settings import ServerSettings
from wde.engine_args import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

ROUTE_MODULES = (
    info,
    embed,
    embed_all,
    embed_sparse,
    rerank,
    cohere_embed,
    predict,
    tokenize,
    decode,
    similarity,
    openai,
    embeddings,
    score,
    classify,
    pooling,
    files,
    batches,
    metrics,
    compat,
)


# FastAPI (>= 0.165) traces, measures and logs every request through the process-global OpenTelemetry
# providers when an application configured them; wde has its own spans (``--otel``,
# server/observability/tracing.py, on the app's own provider) and Prometheus metrics, so FastAPI's would be a
# second set (and its per-request check of the providers costs ~4% of a cached /embed's event-loop time).
# Older FastAPI has no such option.
NO_FASTAPI_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


def build_app(engine_args: EngineArgs | Sequence[EngineArgs], settings: ServerSettings) -> FastAPI:
    """The app over new engines for ``engine_args`` (one model, or several: ``ModelRegistry``), what
    ``wde serve`` runs and each Ray Serve replica (a picklable ``functools.partial(build_app, ...)`` builds
    it where it runs). The engines load when the app's lifespan starts."""
    if isinstance(engine_args, EngineArgs):
        engine_args = [engine_args]
    models = ModelRegistry.from_engine_args(
        engine_args,
        settings.max_loaded_models,
        strict_names=settings.strict_model_name,
        swap_timing=SwapTiming.of(settings),
        freeze_heap=True,  # a server process: server/process/heap_freeze.py
    )
    return create_app(models, settings)


def create_app(
    models: AsyncLLMEngine | ModelRegistry,
    settings: ServerSettings | None = None,
    tracing: Tracing | None = None,
    *,
    metrics: Any = None,
    in_flight_slots: InFlightSlots | None = None,
    batch_link: BatchLink | None = None,
) -> FastAPI:
    """The app over one engine or a ``ModelRegistry``; its lifespan starts the engines (those not started)
    and drains them on shutdown. ``tracing``: OpenTelemetry spans through this tracer (default: as ``--otel``
    and the ``OTEL_*`` environment say, ``server/observability/tracing.py``). An API worker of
    ``--api-workers N`` passes its ``metrics`` (forwarded to the engine process), the workers' shared
    ``in_flight_slots`` and its ``batch_link``: worker 0 runs the Batch API, the others forward its requests
    there."""
    # 1. shared state, metrics and tracing
    settings = (settings or ServerSettings()).with_api_key_file()
    settings.verify()
    if isinstance(models, AsyncLLMEngine):
        models = ModelRegistry.of_engine(models, strict_names=settings.strict_model_name)
    state = AppState(models, settings, metrics=metrics, in_flight_slots=in_flight_slots)
    tracing = tracing or Tracing.from_settings(settings.otel)
    if tracing is not None:
        models.add_engine_hook(lambda model, engine: engine.observe_calls(record_call))
    app = FastAPI(
        title="wde",
        version=wde.__version__,
        lifespan=_lifespan,
        default_response_class=ORJSONResponse,
        **NO_FASTAPI_TELEMETRY,
    )
    app.state.wde = state
    app.state.batches = BatchService(
        settings.batch_folder(port=None),
        app,
        models,
        lambda: state.draining,
        settings.batch_lines_in_flight,
        runs_elsewhere="" if batch_link is None else batch_link.runs_elsewhere,
    )
    app.state.tracing = tracing
    app.state.startup_error = ""  # why the lifespan failed, set by it
    # 2. routes and the error table
    for module in ROUTE_MODULES:
        app.include_router(module.router)
    install_error_handlers(app, settings.retry_after_seconds)
    install_openapi(app, state)
    # 3. middlewares: the request pipeline (metrics, drain cutoff, key, draining, body, admission, HEAD,
    #    ignored fields: one ASGI layer), with CORS inside its metrics and outside its key check (a
    #    browser's preflight carries no key); the last added is the outermost
    wrap_gate = None
    if settings.cors_allow_origins:
        origins = settings.cors_allow_origins
        wrap_gate = functools.partial(
            CORSMiddleware, allow_origins=origins, allow_methods=["*"], allow_headers=["*"]
        )
    routes = [route for module in ROUTE_MODULES for route in module.router.routes]
    known_paths = {route.path for route in routes}
    direct_routes = DirectRoutes(app, routes)
    app.add_middleware(
        RequestPipeline,
        state=state,
        known_paths=known_paths,
        wrap_gate=wrap_gate,
        direct_routes=direct_routes,
        batch_link=batch_link,
    )
    if tracing is not None:  # outermost: the request span covers every answer (imports OpenTelemetry)
        from server.middleware.tracing import TracingMiddleware

        app.add_middleware(TracingMiddleware, tracing=tracing)
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    state: AppState = app.state.wde
    try:
        state.models.start()  # each loads on its engine thread: /health answers 503 until they are ready
        await app.state.batches.start()  # resumes interrupted batches once the engine is ready
    except Exception as e:
        # the engines stop before the failure reaches the host: a process that ends while an engine thread
        # still runs native code dies by SIGABRT instead of exiting with one line (`wde serve` reads this)
        app.state.startup_error = f"the server did not start: {type(e).__name__}: {e}"
        await anyio.to_thread.run_sync(state.models.shutdown)
        raise
    yield
    await app.state.batches.stop()  # lines in flight are aborted: run again when the batch resumes
    # The HTTP server has finished the in-flight requests by now; drain whatever the engine still holds.
    state.begin_drain()
    await anyio.to_thread.run_sync(state.models.shutdown)
    if app.state.tracing is not None:
        await anyio.to_thread.run_sync(app.state.tracing.shutdown)  # flushes the spans still batched
