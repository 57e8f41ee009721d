"""/openapi.json tells the truth: schemathesis generates requests from it (positive: schema-valid, negative:
schema-invalid) against a real uvicorn serving the bundled embedding model and a tiny cross-encoder. No
request gets a 5xx, every status is documented, every 2xx body matches its response schema, positive
requests are accepted and negative ones refused. Bounded: a few examples per operation and phase."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.settings import ServerSettings
from tests.server.conftest import LiveServer, live_uvicorn
from tests.tiny_models import SEED, save_tiny_bert
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.slow  # hypothesis over every route: ~a minute

MAX_EXAMPLES = 12  # per operation and phase
MAX_MESSAGE_CHARS = 3000


@pytest.fixture(scope="module")
def embedding_server(
    async_engine: AsyncLLMEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    settings = ServerSettings(max_client_batch_size=64, batch_dir=str(tmp_path_factory.mktemp("batches")))
    with live_uvicorn(async_engine, settings) as server:
        yield server


@pytest.fixture(scope="module")
def cross_encoder_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    path: Path = save_tiny_bert(
        tmp_path_factory.mktemp("openapi-ce"),
        seed=SEED + 50,
        architecture="BertForSequenceClassification",
        num_labels=1,
    )
    engine = AsyncLLMEngine(EngineArgs(model=str(path)))
    engine.start()
    engine.wait_until_ready(timeout=120)
    try:
        settings = ServerSettings(max_client_batch_size=64, batch_dir=str(tmp_path_factory.mktemp("batches")))
        with live_uvicorn(engine, settings) as server:
            yield server
    finally:
        engine.shutdown(timeout=60)


def run_schemathesis(url: str) -> list[str]:
    """Every operation of the server's schema, both phases; returns the failures found (empty: none)."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis.generation import GenerationMode

    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    # A list longer than --max-client-batch-size (documented as maxItems) is refused with 413, as documented.
    # An input longer than max_model_len with "truncate": false is refused (documented): 413 on TEI's routes,
    # 400 on the OpenAI-shaped ones (server/doors.py), a limit in tokens that no JSON schema of a text can
    # state, so positive cases may meet it. So is the /v1/embeddings body's default output (dense) on a model
    # without it (a SPLADE model): 400 there, 424 as POST /'s body (TEI's route), both documented, and
    # refusals of schema-violating requests too.
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "413", "424"]
    acceptance = schema.config.checks.positive_data_acceptance
    acceptance.expected_statuses = [*acceptance.expected_statuses, "400", "413", "424"]
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in GenerationMode:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=MAX_EXAMPLES,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                database=None,
            )
            def check(case) -> None:
                case.call_and_validate(base_url=url)

            try:
                check()
            except Unsatisfiable:  # a GET without parameters has no schema-violating request to make
                continue
            except Exception as e:  # one operation's failures must not hide another's
                message = str(e)[:MAX_MESSAGE_CHARS]  # a generated body can be megabytes
                failures.append(f"{operation.method.upper()} {operation.path} ({mode.value}): {message}")
    return failures


def test_embedding_server_agrees_with_its_schema(embedding_server: LiveServer) -> None:
    failures = run_schemathesis(embedding_server.url)
    assert not failures, "\n\n".join(failures)


def test_cross_encoder_server_agrees_with_its_schema(cross_encoder_server: LiveServer) -> None:
    failures = run_schemathesis(cross_encoder_server.url)
    assert not failures, "\n\n".join(failures)
