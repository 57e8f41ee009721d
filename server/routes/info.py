"""TEI ``GET /info`` (model and limits) and ``GET /health``, ``GET /`` and ``GET /ping`` (TEI's health
routes: 200 when ready; 503 while loading or shutting down, when the engine is dead, or while a forward
pass runs past --max-batch-seconds)."""

from __future__ import annotations

from fastapi import APIRouter, Request

import wde
from server.app_state import AppState, get_state
from server.errors import ServerDrainingError
from server.observability.engine_monitor import wedged_reason
from server.protocols.tei import HealthResponse, InfoResponse
from server.responses import ORJSONResponse
from server.routes import held_engine
from server.served_models.model_registry import ServedModel
from wde.config import ModelConfig
from wde.entrypoints.engine_thread import EngineDeadError, EngineState, EngineUnavailableError
from wde.entrypoints.output_precision import BUNDLED

router = APIRouter(tags=["TEI"])

# The engine thread tokenizes each scheduling window in one batched call (the tokenizer's own threads
# parallelize it): one worker, in TEI's terms.
TOKENIZATION_WORKERS = 1


@router.get("/health", response_model=HealthResponse, response_class=ORJSONResponse)
@router.get("/ping", response_model=HealthResponse, response_class=ORJSONResponse)
@router.get("/", response_model=HealthResponse, response_class=ORJSONResponse)
async def health(request: Request) -> ORJSONResponse:
    """Ready when every loaded model is (a model unloaded by --max-loaded-models loads on demand)."""
    state = get_state(request)
    if state.draining:
        raise ServerDrainingError("the server is shutting down")
    for model in state.models.loaded():
        engine = model.engine
        if model.evicting or engine is None:
            continue  # unloading for another model: not a failure
        prefix = f"model {model.name!r}: " if state.models.is_multi_model else ""
        if engine.state == EngineState.FAILED:
            raise EngineDeadError(prefix + engine.unavailable_reason)
        if not engine.is_ready:
            raise EngineUnavailableError(prefix + engine.unavailable_reason)
        wedged = wedged_reason(engine, state.settings.max_batch_seconds)
        if wedged:
            raise EngineUnavailableError(prefix + wedged)
    return ORJSONResponse({"status": "ready"})


@router.get("/info", response_model=InfoResponse, response_class=ORJSONResponse)
async def info(request: Request) -> ORJSONResponse:
    """TEI's /info of the default (first) model; a multi-model server lists every model in ``models``."""
    state = get_state(request)
    default = describe(state, state.models.default)
    if state.models.is_multi_model:
        default["models"] = [describe(state, model) for model in state.models.models]
    return ORJSONResponse(default)


def describe(state: AppState, model: ServedModel) -> dict:
    """One model's TEI /info fields: from its loaded engine, else from its configuration (read at
    start-up; ``attention_backend`` is then null: it is chosen when the model loads)."""
    engine = model.engine
    # an API worker's engine is in the engine process, which may have unloaded it (--max-loaded-models)
    residency = None if engine is None else engine.residency
    loaded = engine is not None and engine.is_ready and (residency is None or residency.loaded)
    if engine is not None and engine.is_ready:
        engine_config = engine.info.engine_config
        attention_backend = engine.info.attention_backend if loaded else None
    elif model.config is not None:
        engine_config, attention_backend = model.config, None
    else:
        engine_config, attention_backend = held_engine(model).info.engine_config, None  # 503 while loading
    model_config = engine_config.model_config
    scheduler_config = engine_config.scheduler_config
    max_batch_tokens = scheduler_config.max_num_batched_tokens
    return {
        "model_id": model.name,
        "served_model_name": model.name,  # TEI >= 1.9: the name clients send (wde's model_id too)
        "model_sha": model_config.model_revision,  # the Hub commit; null for a local folder
        "model_dtype": model_config.dtype,
        "quantization": model_config.quantization,
        "model_type": _model_type(model_config),
        "model_architecture": model_config.architecture,
        "outputs": list(model_config.outputs) if model_config.task == "embed" else [],
        "max_concurrent_requests": state.settings.max_concurrent_requests,
        "max_input_length": model_config.max_model_len,
        # TEI's Info has an integer: before an "auto" budget is sized, a batch holds one full-length input
        "max_batch_tokens": max_batch_tokens
        if isinstance(max_batch_tokens, int)
        else model_config.max_model_len,
        "max_batch_requests": scheduler_config.max_num_seqs,
        "max_client_batch_size": state.settings.max_client_batch_size,
        "auto_truncate": model_config.truncate,
        "tokenization_workers": TOKENIZATION_WORKERS,
        "version": wde.__version__,
        "sha": None,
        "docker_label": None,
        "attention_backend": attention_backend,
        "device": engine_config.device_config.device,
        "executor": engine_config.device_config.executor,
        "result_cache": _result_cache(model),
        "calibration": _calibration(model, model_config),
        "loaded": loaded,
        "num_loads": model.num_loads if residency is None else residency.num_loads,
    }


def _result_cache(model: ServedModel) -> dict:
    """--cache-size (MiB; 0: off) and whether identical inputs of a request run once (with the cache on)."""
    engine = model.engine
    reuse = None if engine is None else engine.result_reuse
    return {
        "size_mib": model.engine_args.cache_size,
        "max_bytes": 0 if reuse is None else reuse.cache.max_bytes,
        "deduplicate": reuse is not None,
    }


def _calibration(model: ServedModel, model_config: ModelConfig) -> dict | None:
    """The texts of int8 / uint8 ranges (the loaded engine's; else only the source); None for a model
    without dense output."""
    if not model_config.has_dense_output:
        return None
    if model.engine is not None:
        return model.engine.calibration.describe()
    return {"source": model.engine_args.calibration_file or BUNDLED, "num_texts": None}


# Our pooling names -> TEI's (tei-client validates pooling against TEI's names).
_TEI_POOLING = {"cls": "cls", "mean": "mean", "last": "last_token", "max": "max"}


def _model_type(model_config) -> dict:
    """TEI's model_type: a one-label cross-encoder is a "reranker", a classifier of several labels a
    "classifier" (both with id2label and label2id); anything else an "embedding" model, whose pooling is
    "splade" when its output is sparse (as TEI says of SPLADE models)."""
    if model_config.task == "score":
        id2label = model_config.hf_config.get("id2label") or {"0": "LABEL_0"}
        id2label = {str(key): str(value) for key, value in id2label.items()}
        label2id = {label: int(key) for key, label in id2label.items()}
        kind = "reranker" if model_config.num_labels == 1 else "classifier"
        return {kind: {"id2label": id2label, "label2id": label2id}}
    if model_config.outputs[0] == "sparse":
        return {"embedding": {"pooling": "splade"}}
    return {"embedding": {"pooling": _TEI_POOLING[model_config.pooling.method]}}
