"""``ServerSettings``: the HTTP server's own limits (engine knobs live in ``wde.EngineArgs``)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, fields, replace
from pathlib import Path

from wde.flag_field import flag

# Defaults: TEI's payload limit (2 MB) and max concurrent requests (512). TEI caps a client batch at 32
# inputs; we allow 2048 so that batching clients keep working (LangChain's OpenAIEmbeddings sends 1,000
# texts per request by default; the payload limit still bounds the bytes).
DEFAULT_PAYLOAD_LIMIT = 2_000_000
DEFAULT_MAX_CLIENT_BATCH_SIZE = 2048
DEFAULT_MAX_CONCURRENT_REQUESTS = 512
# /tokenize answers ~70 bytes of JSON per token: 131,072 tokens (about 500,000 characters of English) is
# a ~9 MB answer.
DEFAULT_MAX_TOKENIZE_TOKENS = 131_072
# The Batch API's folders when --batch-dir is not given: one per port, so that two servers of one user on
# one machine (two models on two ports) each have theirs, and a restart on the same port finds its batches.
BATCH_DIRS = "~/.cache/wde/batches"


@dataclass
class ServerSettings:
    api_key: str | None = flag(
        None,
        help="require 'Authorization: Bearer <key>' (all routes but /health, /metrics); prefer WDE_API_KEY",
    )
    api_key_file: str | None = flag(
        None, help="read the API key from this file (whitespace stripped); unlike --api-key, not seen in ps"
    )
    payload_limit: int = flag(DEFAULT_PAYLOAD_LIMIT, help="largest request body in bytes (413 above)")
    max_client_batch_size: int = flag(
        DEFAULT_MAX_CLIENT_BATCH_SIZE, help="most inputs in one request (413 above)"
    )
    max_tokenize_tokens: int = flag(
        DEFAULT_MAX_TOKENIZE_TOKENS,
        help="tokens one /tokenize request answers, its inputs together (~70 bytes of JSON each); more: 422",
    )
    api_workers: int | str = flag(
        "auto",
        help="HTTP processes (parsing, validation, JSON) in front of one engine process that holds the "
        "model; auto: 1 on a machine of 2 cores or fewer, on a GPU half the cores (at most 8), else a "
        "quarter (at most 4). 1: one process does everything",
    )
    max_concurrent_requests: int = flag(
        DEFAULT_MAX_CONCURRENT_REQUESTS, help="requests in flight; more are answered 429 at once"
    )
    retry_after_seconds: int = flag(1, help="the Retry-After header of 429 / 503 answers")
    strict_model_name: bool = flag(
        False,
        help="answer 404 to requests naming another model than --served-model-name (default: a server of one "
        "model answers any name, as TEI does)",
    )
    strict_request_fields: bool = flag(
        False,
        help="answer 422 to body fields a route does not know (default: ignore them, as TEI and vLLM do, and "
        "name them in the x-wde-ignored-fields header)",
    )
    access_log: bool = flag(
        True, help="log one line per request (method, route, status, duration, inputs, tokens; wde.access)"
    )
    exit_on_engine_failure: bool = flag(
        True, help="exit 1 (within --graceful-timeout) when the engine dies, for a supervisor to restart it"
    )
    max_batch_seconds: float = flag(
        300.0, help="/health answers 503 while one forward pass runs longer (a wedged engine)"
    )
    body_read_timeout: float = flag(
        30.0, help="seconds to receive a request body; slower clients get 408 and are disconnected"
    )
    header_read_timeout: float = flag(
        10.0, help="seconds to receive the request line and headers (408 and disconnected after)"
    )
    max_header_bytes: int = flag(65536, help="largest request line + headers in bytes (431 above)")
    keep_alive_timeout: float = flag(5.0, help="seconds an idle keep-alive connection stays open")
    cors_allow_origins: list[str] | None = flag(
        None,
        help="browser origins allowed to call the API (CORS): https://app.example, or * for any (unset: off)",
    )
    batch_dir: str | None = flag(
        None,
        help="the Batch API's folder: uploaded files, batches and their outputs, kept across restarts (one "
        f"server per folder; unwritable: the Batch API is off); default {BATCH_DIRS}/port-PORT, one per "
        "server on the machine",
    )
    batch_lines_in_flight: int = flag(
        16,
        help="lines of a running batch in the engine at once (a window that keeps interactive requests "
        "first, not the whole file)",
    )
    max_loaded_models: int | None = flag(
        None,
        help="several models: at most this many loaded at once; a request for another waits while the least "
        "recently used one finishes its requests and unloads (swaps go by queue: "
        "server/served_models/swap_policy.py)",
    )
    max_swap_wait: float = flag(
        2.0,
        help="seconds a request for an unloaded model waits while the loaded ones still have requests, "
        "before the least recently used is made to finish its requests and unload (--max-loaded-models)",
    )
    min_model_residency: float = flag(
        1.0,
        help="seconds a model that just loaded serves its requests before a queued model can make it yield "
        "(as long as its load took if longer, at most --max-swap-wait; the longest wait: "
        "server/served_models/swap_policy.py)",
    )
    otel: bool | None = flag(
        None,
        help="OpenTelemetry traces (a span per request; exporter from OTEL_*; pip install 'wde[otel]'); "
        "unset: on when OTEL_* configures a trace exporter",
    )

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def verify(self) -> None:
        if self.api_workers != "auto" and (
            isinstance(self.api_workers, bool)
            or not isinstance(self.api_workers, int)
            or self.api_workers < 1
        ):
            raise ValueError(f"--api-workers must be auto or an integer >= 1, got {self.api_workers!r}")
        for name in (
            "payload_limit",
            "max_client_batch_size",
            "max_tokenize_tokens",
            "max_concurrent_requests",
            "max_header_bytes",
            "batch_lines_in_flight",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.max_loaded_models is not None and (
            isinstance(self.max_loaded_models, bool) or self.max_loaded_models < 1
        ):
            raise ValueError(f"max_loaded_models must be a positive int, got {self.max_loaded_models!r}")
        if self.retry_after_seconds < 0:
            raise ValueError(f"retry_after_seconds must be >= 0, got {self.retry_after_seconds}")
        if self.api_key is not None and not self.api_key:
            raise ValueError("api_key is empty; pass a non-empty key or leave it unset")
        if isinstance(self.max_batch_seconds, bool) or not self.max_batch_seconds > 0:
            raise ValueError(f"max_batch_seconds must be > 0, got {self.max_batch_seconds!r}")
        if self.api_key is not None and self.api_key_file is not None:
            raise ValueError("api_key and api_key_file are both set; pass one of them")
        for name in ("body_read_timeout", "header_read_timeout", "keep_alive_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        for name in ("max_swap_wait", "min_model_residency"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
        if self.min_model_residency > self.max_swap_wait:
            raise ValueError(
                f"min_model_residency ({self.min_model_residency}) must not exceed max_swap_wait "
                f"({self.max_swap_wait}): a request waits at most the larger of the two plus a load"
            )
        if self.cors_allow_origins is not None and not all(self.cors_allow_origins):
            raise ValueError(f"cors_allow_origins has an empty origin: {self.cors_allow_origins!r}")
        if self.batch_dir is not None and not self.batch_dir:
            raise ValueError("batch_dir is empty; pass a folder for the Batch API's files (--batch-dir)")
        if self.otel and importlib.util.find_spec("opentelemetry.sdk") is None:
            raise ValueError("otel: OpenTelemetry is not installed; pip install 'wde[otel]' or drop --otel")

    def batch_folder(self, port: int | None) -> Path:
        """``--batch-dir`` when given, else this port's own folder under ``BATCH_DIRS`` (an app built in a
        process without a port of its own, as in the tests: ``BATCH_DIRS/in-process``)."""
        if self.batch_dir is not None:
            return Path(self.batch_dir).expanduser()
        return Path(BATCH_DIRS).expanduser() / (f"port-{port}" if port is not None else "in-process")

    def with_api_key_file(self) -> ServerSettings:
        """This, with ``api_key`` read from ``api_key_file`` (surrounding whitespace stripped)."""
        if self.api_key_file is None:
            return self
        if self.api_key is not None:
            raise ValueError("api_key and api_key_file are both set; pass one of them")
        try:
            key = Path(self.api_key_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"api_key_file cannot be read ({e}); pass a readable file") from e
        if not key:
            raise ValueError(f"api_key_file {self.api_key_file!r} is empty; write the key into it")
        return replace(self, api_key=key, api_key_file=None)
