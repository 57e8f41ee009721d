"""An API worker is ready the moment it hears that the engine process is: its tokenizer is made when its
engine client starts (before the worker accepts connections), not when "ready" arrives. Otherwise one worker
answers /health 200 while another, still loading its tokenizer, answers a request 503 "still loading"
(``test_one_request_after_another_is_never_refused_at_a_bound_of_1`` failed so under CI load)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from server.engine_link.client import EngineLink
from server.engine_link.messages import ModelState
from tests.tiny_models import SEED, save_tiny_bert
from wde import EngineArgs
from wde.entrypoints.engine_thread import EngineState


@pytest.fixture(scope="module")
def embedder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("readiness"), seed=SEED + 51)


def model_state(state: EngineState) -> ModelState:
    ready = state == EngineState.READY
    return ModelState(
        state=state.value,
        reason="" if ready else "the model is still loading; retry in a few seconds",
        num_waiting=0,
        num_unfinished=0,
        forward_seconds=0.0,
        backend="torch_sdpa" if ready else "",
        max_num_batched_tokens=1024 if ready else None,
        budget_reason=None,
    )


def test_a_started_worker_has_its_tokenizer_before_the_engine_is_ready(embedder_dir: Path) -> None:
    engine_args = EngineArgs(model=str(embedder_dir), device="cpu")
    engine_config = engine_args.create_engine_config()
    with tempfile.TemporaryDirectory(prefix="wde-test-ready-") as ipc_dir:  # no engine process behind it
        link = EngineLink("test0", ipc_dir, None)
        try:
            engine = link.engine(0, engine_args, engine_config)
            thread = link.threads[0]
            engine.start()
            assert thread.state == EngineState.LOADING
            preparer = thread._preparer
            assert preparer is not None, "the tokenizer is made at start, before any state message"

            thread.update(model_state(EngineState.LOADING))
            assert not engine.is_ready
            thread.update(model_state(EngineState.READY))
            assert engine.is_ready
            assert thread._preparer is preparer  # not made again on "ready"
            assert engine.info.attention_backend == "torch_sdpa"

            again = link.engine(0, engine_args, engine_config)  # the model swapped back in
            again.start()
            assert link.threads[0]._preparer is preparer  # one tokenizer per model per worker
        finally:
            link.close()
