"""``install_openapi(app, state)``: an /openapi.json that tells the truth about this server.

FastAPI's schema documents 200 and 422 only, and knows nothing of the served model. This adds, per route,
the error statuses the server answers (in the route family's error shape: TEI's, OpenAI's or Cohere's)
and, once the model is loaded, the model's own limits: only the routes of its task and output kinds, its
prompt names, its hidden size for ``dimensions``, its vocabulary for token ids, --max-client-batch-size for
lists, and the bodies TEI's ``POST /`` takes for it. Generated clients and schemathesis' positive cases then
send what the server accepts. The complete schema is built once, after the model is loaded.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from server.app_state import AppState
from server.doors import TEI_MODEL_PATHS, Door, door_of
from server.protocols.cohere import CohereErrorResponse
from server.protocols.common import RequestModel
from server.protocols.infinity import InfinityClassifyRequest
from server.protocols.openai import OpenAIErrorResponse
from server.protocols.tei import TEIErrorResponse
from server.routes.compat import root_bodies
from wde.config import PRECISION_NAMES, ModelConfig
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.output_kinds import OUTPUT_KINDS, routes_of

REF = "#/components/schemas/{model}"
PUBLIC_PATHS = frozenset({"/health", "/metrics"})
NO_MODEL_PATHS = ("/v1/files", "/v1/batches")  # POST routes that name no model
# The statuses every POST route may answer besides 200 and 422 (README's error table), by door
# (server/doors.py): TEI's routes answer TEI's 413 and 424 where the others answer OpenAI's 400.
POST_ERRORS = {
    400: "an input is too long with truncation off, the body is not UTF-8, or the model serves another task "
    "or output kind",
    408: "the headers or the body arrived too slowly",
    413: "the body or the number of inputs is over the limit",
    429: "too many requests in flight; retry after Retry-After",
    431: "the headers are too large",
    500: "running an input failed (only that input's request)",
    503: "the model is loading, the server is shutting down, or the engine died",
}
TEI_POST_ERRORS = {
    **POST_ERRORS,
    400: "the body is not UTF-8, or the list of inputs is empty",
    413: "the body or the number of inputs is over the limit, or an input is too long with truncation off",
}
TEI_MODEL_POST_ERRORS = {**TEI_POST_ERRORS, 424: "the model serves another task or output kind"}
# Cohere's door: any body it cannot take is 400 (no 422), too many texts too.
COHERE_POST_ERRORS = {
    **POST_ERRORS,
    400: "invalid input (the message names the field), too many texts, an input too long with truncate NONE, "
    "or a model without embeddings",
    413: "the body is over the limit",
}
ERROR_MODELS = {
    Door.TEI: "TEIErrorResponse",
    Door.OPENAI: "OpenAIErrorResponse",
    Door.COHERE: "CohereErrorResponse",
}
# Routes of dense vectors beside the output kinds' own (wde/output_kinds.py).
DENSE_PATHS = frozenset({"/similarity", "/v1/embed", "/v2/embed"})
GET_ERRORS = {503: "the model is loading or the server is shutting down"}
TASK_PATHS = {  # routes that only a model of the other task can serve
    "embed": {"/predict", "/classify", "/v1/classify"},
    "score": routes_of(tuple(OUTPUT_KINDS)) | DENSE_PATHS | {"/embeddings"},
}
# Request components holding vLLM's truncate_prompt_tokens (at most max_model_len).
TRUNCATE_PROMPT_TOKENS_BODIES = (
    "CohereRerankRequest",
    "ScoreRequest",
    "ClassificationRequest",
    "PoolingRequest",
)


def install_openapi(app: FastAPI, state: AppState) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        _document_errors(schema, state)
        _document_classify_bodies(schema)
        if state.settings.strict_request_fields:
            _forbid_unknown_fields(schema)
        if state.models.is_multi_model:  # every route; each request's ``model`` picks its model
            app.openapi_schema = schema
            return schema
        engine = state.models.default.engine
        if engine is None or not engine.is_ready:
            return schema  # the model's limits are not known yet: built again on the next call
        _constrain_to_model(schema, engine.info.model_config, engine, state)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


# ---- errors ---------------------------------------------------------------------------------------------
def _document_errors(schema: dict[str, Any], state: AppState) -> None:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in (TEIErrorResponse, OpenAIErrorResponse, CohereErrorResponse):
        model_schema = model.model_json_schema(ref_template=REF)
        components.update(model_schema.pop("$defs", {}))
        components[model.__name__] = model_schema
    for path, operations in schema["paths"].items():
        door = door_of(path)
        error_model = ERROR_MODELS[door]
        for method, operation in operations.items():
            errors = dict(_post_errors(path) if method == "post" else GET_ERRORS)
            if state.settings.api_key and path not in PUBLIC_PATHS:
                errors[401] = "missing or wrong API key"
            if state.models.is_multi_model and method == "post" and not path.startswith(NO_MODEL_PATHS):
                errors[404] = "the request names a model this server does not serve (GET /v1/models)"
            elif state.settings.strict_model_name and path.startswith(("/v1/", "/v2/")) and method == "post":
                errors[404] = "the request names another model (--strict-model-name)"
            responses = operation.setdefault("responses", {})
            if "422" in responses and door is Door.COHERE:  # Cohere's invalid input: 400 (COHERE_POST_ERRORS)
                del responses["422"]
            elif "422" in responses:
                errors[422] = "invalid input: the message names the field"
            for status, description in errors.items():
                responses[str(status)] = {
                    "description": description,
                    "content": {"application/json": {"schema": {"$ref": REF.format(model=error_model)}}},
                }


def _post_errors(path: str) -> dict[int, str]:
    door = door_of(path)
    if door is Door.COHERE:
        return COHERE_POST_ERRORS
    if door is Door.OPENAI:
        return POST_ERRORS
    return TEI_MODEL_POST_ERRORS if path in TEI_MODEL_PATHS else TEI_POST_ERRORS


# ---- request bodies -------------------------------------------------------------------------------------
def _document_classify_bodies(schema: dict[str, Any]) -> None:
    """POST /classify takes vLLM's body or Infinity's (told apart by ``raw_scores``)."""
    components = schema["components"]["schemas"]
    infinity = InfinityClassifyRequest.model_json_schema(ref_template=REF)
    components.update(infinity.pop("$defs", {}))
    components[InfinityClassifyRequest.__name__] = infinity
    operation = schema["paths"].get("/classify", {}).get("post")
    if operation is not None:
        bodies = [
            {"$ref": REF.format(model=name)} for name in ("ClassificationRequest", "InfinityClassifyRequest")
        ]
        operation["requestBody"] = {
            "content": {"application/json": {"schema": {"anyOf": bodies}}},
            "required": True,
        }


def _forbid_unknown_fields(schema: dict[str, Any]) -> None:
    """--strict-request-fields: every request body says so (unknown fields answer 422)."""
    names = {cls.__name__ for cls in _subclasses(RequestModel)}
    for name, component in schema["components"]["schemas"].items():
        if name in names and component.get("type") == "object":
            component["additionalProperties"] = False


def _subclasses(cls: type) -> list[type]:
    direct: list[type] = cls.__subclasses__()
    return [sub for child in direct for sub in (child, *_subclasses(child))]


# ---- the model's limits ---------------------------------------------------------------------------------
def _constrain_to_model(
    schema: dict[str, Any], model_config: ModelConfig, engine: AsyncLLMEngine, state: AppState
) -> None:
    # 1. only the routes of the model's task and output kinds
    for path in TASK_PATHS[model_config.task] | _missing_output_paths(model_config):
        schema["paths"].pop(path, None)
    # 2. POST / and /invocations take the bodies of the model's routes
    root_body = {"oneOf": [{"$ref": REF.format(model=name)} for name in root_bodies(model_config)]}
    for path in ("/", "/invocations"):
        operation = schema["paths"].get(path, {}).get("post")
        if operation is not None:
            operation["requestBody"]["content"]["application/json"]["schema"] = root_body
    # 3. fields whose valid values depend on the model and the server's limits
    components = schema["components"]["schemas"]
    limits = _Limits(model_config, state.settings.max_client_batch_size)
    for name in (
        "EmbedRequest",
        "EmbedSparseRequest",
        "EmbeddingRequest",
        "UnversionedEmbeddingRequest",
        "TokenizeRequest",
        "ClassificationRequest",
        "PoolingRequest",
        "SimilarityParameters",
    ):
        properties = components.get(name, {}).get("properties", {})
        for field in ("inputs", "input"):
            if field in properties:
                limits.constrain_inputs(properties[field])
        if "dimensions" in properties:
            for option in properties["dimensions"].get("anyOf", []):
                if option.get("type") == "integer":
                    option["maximum"] = model_config.embedding_size
        if "prompt_name" in properties:
            properties["prompt_name"] = {
                "anyOf": [{"type": "string", "enum": sorted(model_config.prompts)}, {"type": "null"}]
                if model_config.prompts
                else [{"type": "null"}],
                "description": "a prompt of this model (config_sentence_transformers.json)",
            }
        if "task" in properties:  # /v1/embeddings: Jina's field, a task adapter of this model
            tasks = model_config.task_adapters.names if model_config.task_adapters is not None else ()
            properties["task"] = {
                "anyOf": [{"type": "string", "enum": list(tasks)}, {"type": "null"}]
                if tasks
                else [{"type": "null"}],
                "description": "a task adapter of this model (Jina v3's lora_adaptations)",
            }
    for name, field in (
        ("RerankRequest", "texts"),
        ("CohereRerankRequest", "documents"),
        ("CohereEmbedRequest", "texts"),
        ("CohereEmbedRequest", "inputs"),
        ("CohereEmbedV1Request", "texts"),
        ("SimilarityInput", "sentences"),
        ("InfinityClassifyRequest", "input"),
    ):
        properties = components.get(name, {}).get("properties", {})
        for option in properties[field].get("anyOf", [properties[field]]) if field in properties else []:
            if option.get("type") == "array":
                option["maxItems"] = state.settings.max_client_batch_size
    score = components.get("ScoreRequest", {}).get("properties", {})
    for field in ("text_1", "text_2"):
        for option in score.get(field, {}).get("anyOf", []):
            if option.get("type") == "array":
                option["maxItems"] = state.settings.max_client_batch_size
    for name in TRUNCATE_PROMPT_TOKENS_BODIES:
        properties = components.get(name, {}).get("properties", {})
        if "truncate_prompt_tokens" in properties:
            _set_maximum(properties["truncate_prompt_tokens"], model_config.max_model_len)
    decode = components.get("DecodeRequest", {}).get("properties", {})
    if "ids" in decode:
        max_token_id = engine.info.tokenizer.get_vocab_size(with_added_tokens=True) - 1
        _set_maximum(decode["ids"], max_token_id)
        for option in decode["ids"].get("anyOf", []):
            if option.get("items", {}).get("type") == "array":
                option["maxItems"] = state.settings.max_client_batch_size
    # 4. rerank: raw logits exist only for a cross-encoder; a structured document documented with its
    #    "text" (with rank_fields, other string fields are ranked instead)
    if model_config.task == "embed":
        for name in ("RerankRequest", "CohereRerankRequest"):
            components[name]["properties"]["raw_scores"] = {"type": "boolean", "enum": [False]}
    cohere = components.get("CohereRerankRequest")
    if cohere is not None:
        _document_structured_documents(cohere)
    # 5. the output kinds and options an embedding model has (precision: of dense vectors only)
    _constrain_output_options(components, model_config)
    # 6. an instruction only for an LLM reranker (a model with a pair template), which truncates on the right
    #    only (its template's start holds the instruction)
    if model_config.task != "score" or model_config.pair_template is None:
        for name in ("RerankRequest", "CohereRerankRequest", "ScoreRequest"):
            properties = components.get(name, {}).get("properties", {})
            if "instruction" in properties:
                properties["instruction"] = {"type": "null", "description": "this model takes no instruction"}
    else:
        right_only = {"type": "string", "enum": ["right", "Right"], "default": "right"}
        for component in components.values():
            for field in ("truncation_direction", "truncation_side"):
                if field in component.get("properties", {}):
                    component["properties"][field] = right_only


def _constrain_output_options(components: dict[str, Any], model_config: ModelConfig) -> None:
    """/v1/embeddings' ``output`` names the model's kinds (distinct); options of a kind the model lacks
    take null only; precision (each of them, int8 / uint8 too: their ranges come from --calibration-file or
    the bundled set) and chunking only for dense output; Cohere's output_dimension up to the embedding
    size."""
    kinds = list(model_config.outputs) if model_config.task == "embed" else ["dense"]
    precisions = list(PRECISION_NAMES) if "dense" in kinds else ["float32"]
    null = {"type": "null"}
    for name in ("EmbedRequest", "EmbeddingRequest", "UnversionedEmbeddingRequest"):
        properties = components.get(name, {}).get("properties", {})
        if "precision" in properties:
            properties["precision"] = {"type": "string", "enum": precisions, "default": "float32"}
        if "long_input" in properties and "dense" not in kinds:
            properties["long_input"] = {"anyOf": [{"type": "string", "enum": ["truncate", "error"]}, null]}
    for name in ("EmbeddingRequest", "UnversionedEmbeddingRequest"):
        properties = components.get(name, {}).get("properties", {})
        if "output" in properties:
            kind = {"type": "string", "enum": kinds}
            many = {"type": "array", "items": kind, "minItems": 1, "uniqueItems": True}
            properties["output"] = {"anyOf": [kind, many], "default": "dense"}
        if "dimensions" in properties and "dense" not in kinds:
            properties["dimensions"] = null
        if "max_active_dims" in properties and "sparse" not in kinds:
            properties["max_active_dims"] = null
    for name in ("CohereEmbedRequest", "CohereEmbedV1Request"):
        properties = components.get(name, {}).get("properties", {})
        for option in properties.get("output_dimension", {}).get("anyOf", []):
            if option.get("type") == "integer":
                option["maximum"] = model_config.embedding_size


def _missing_output_paths(model_config: ModelConfig) -> set[str]:
    """An embedding model's routes for output kinds it does not produce (a SPLADE model: no /embed, no
    /similarity)."""
    if model_config.task != "embed":
        return set()
    missing = routes_of(tuple(OUTPUT_KINDS)) - routes_of(model_config.outputs)
    return missing | (set(DENSE_PATHS) if "dense" not in model_config.outputs else set())


def _set_maximum(node: dict[str, Any], maximum: int) -> None:
    """Every integer bound of ``node`` (through anyOf / items) gets ``maximum``."""
    if node.get("type") == "integer" and "const" not in node:
        node["maximum"] = maximum
    for option in node.get("anyOf", []):
        _set_maximum(option, maximum)
    if isinstance(node.get("items"), dict):
        _set_maximum(node["items"], maximum)


def _document_structured_documents(cohere: dict[str, Any]) -> None:
    """A document is a string or an object of string fields; without rank_fields an object needs "text"
    (with rank_fields, the fields it has of those are ranked)."""
    string_fields = {"type": "object", "additionalProperties": {"type": "string"}}
    cohere["properties"]["documents"]["items"] = {"anyOf": [{"type": "string"}, string_fields]}
    with_text = {**string_fields, "required": ["text"]}
    cohere["if"] = {"required": ["rank_fields"], "properties": {"rank_fields": {"type": "array"}}}
    cohere["else"] = {"properties": {"documents": {"items": {"anyOf": [{"type": "string"}, with_text]}}}}


class _Limits:
    def __init__(self, model_config: ModelConfig, max_client_batch_size: int) -> None:
        self.max_token_id = model_config.vocab_size - 1
        self.max_client_batch_size = max_client_batch_size

    def constrain_inputs(self, node: dict[str, Any]) -> None:
        """An ``inputs`` schema: str | [str | token ids] | token ids. (Text length is bounded by
        --payload-limit, in bytes: no maxLength in characters to document.)"""
        for option in node.get("anyOf", [node]):
            if option.get("type") == "array" and option.get("items", {}).get("type") == "integer":
                self._constrain_token_ids(option)
            elif option.get("type") == "array":
                option["maxItems"] = self.max_client_batch_size
                self.constrain_inputs(option["items"])

    def _constrain_token_ids(self, node: dict[str, Any]) -> None:
        # no maxItems: longer lists are cut to max_model_len when the request truncates, 400 otherwise
        node["items"]["maximum"] = self.max_token_id
