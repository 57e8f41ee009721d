"""``ModelRegistry`` without a real model: routing by name and task, 404s naming the served models,
--max-loaded-models (least recently used unloaded, in-flight requests finish first, loads counted, a failed
load answered and retried), the start-up memory check and models.yaml."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from server.errors import ModelNotFoundError
from server.served_models.model_memory import check_models_fit
from server.served_models.model_registry import EMBED, SCORE, ModelRegistry, ServedModel
from server.served_models.models_file import read_models_file
from server.served_models.swap_policy import SwapTiming
from tests.server.fake_engine import FakeEngine
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.engine_thread import EngineUnavailableError

pytestmark = pytest.mark.anyio
TIMEOUT = 30.0


def fake_engine(args: EngineArgs) -> AsyncLLMEngine:
    """A real AsyncLLMEngine (thread, states, shutdown) over a stand-in LLMEngine; "broken" fails to load."""

    def build() -> FakeEngine:
        if args.served_model_name == "broken":
            raise RuntimeError("no weights in the folder")
        return FakeEngine()

    return AsyncLLMEngine(args, build_engine=build)


def served(name: str, task: str | None = None) -> ServedModel:
    model = ServedModel(EngineArgs(model=f"/models/{name}", served_model_name=name))
    if task is not None:  # as read at start-up (only the task matters here)
        model.config = SimpleNamespace(model_config=SimpleNamespace(task=task, served_model_name=name))
    return model


def registry(
    *models: ServedModel, max_loaded_models: int | None = None, swap_timing: SwapTiming | None = None
) -> ModelRegistry:
    return ModelRegistry(list(models), max_loaded_models, make_engine=fake_engine, swap_timing=swap_timing)


def test_names_and_tasks_route_requests() -> None:
    models = registry(served("ce", SCORE), served("minilm", EMBED), served("bge", EMBED))
    assert models.resolve("bge").name == "bge"
    assert models.resolve(None, EMBED).name == "minilm"  # the first model of the route's kind
    assert models.resolve(None, SCORE).name == "ce"
    assert models.resolve(None).name == "ce"  # a route of any kind: the first model
    with pytest.raises(
        ModelNotFoundError, match=r"'text-embedding-3-small' is not served.*'ce', 'minilm', 'bge'"
    ):
        models.resolve("text-embedding-3-small")


def test_one_model_answers_any_name_unless_strict() -> None:
    assert registry(served("minilm")).resolve("rerank-v3.5").name == "minilm"  # as TEI does
    strict = ModelRegistry([served("minilm")], strict_names=True, make_engine=fake_engine)
    with pytest.raises(ModelNotFoundError, match="--strict-model-name"):
        strict.resolve("rerank-v3.5")


def test_two_models_with_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="served_model_name"):
        registry(served("a"), served("a"))


async def test_least_recently_used_model_is_unloaded_for_another() -> None:
    models = registry(served("a"), served("b"), served("c"), max_loaded_models=2)
    models.start()  # the first two load
    try:
        assert [model.name for model in models.loaded()] == ["a", "b"]
        async with models.use("a"):
            pass  # b is now the least recently used
        async with models.use("c") as model:
            assert model.engine.is_ready
        assert [model.name for model in models.loaded()] == ["a", "c"]
        async with models.use("b"):
            pass
        assert [model.name for model in models.loaded()] == ["b", "c"]
        assert [model.num_loads for model in models.models] == [1, 2, 1]
    finally:
        await asyncio.to_thread(models.shutdown)


async def test_unloading_waits_for_the_requests_holding_the_model() -> None:
    # b's request waits 0.1 s for a's queue, then a is made to yield (test_model_swaps.py: the queue rules)
    models = registry(served("a"), served("b"), max_loaded_models=1, swap_timing=SwapTiming(0.1, 0.0))
    models.start()
    order: list[str] = []
    release_a = asyncio.Event()

    async def hold_a() -> None:
        async with models.use("a"):
            order.append("a in use")
            await release_a.wait()
            order.append("a released")

    async def use_b() -> None:
        async with models.use("b"):
            order.append("b in use")

    try:
        holder = asyncio.create_task(hold_a())
        await asyncio.sleep(0.05)
        waiter = asyncio.create_task(use_b())
        await asyncio.sleep(0.2)
        assert order == ["a in use"] and models.models[0].evicting  # b waits; new requests for a wait too
        release_a.set()
        await asyncio.wait_for(asyncio.gather(holder, waiter), TIMEOUT)
        assert order == ["a in use", "a released", "b in use"]
        assert models.models[0].engine is None and not models.models[0].evicting
    finally:
        await asyncio.to_thread(models.shutdown)


async def test_a_failed_load_is_a_503_naming_the_model_and_is_tried_again() -> None:
    models = registry(served("a"), served("broken"), max_loaded_models=1)
    models.start()
    try:
        for attempt in (1, 2):
            with pytest.raises(EngineUnavailableError, match=r"'broken' failed to load.*no weights"):
                async with models.use("broken"):
                    pass
            assert models.models[1].num_loads == attempt and not models.models[1].is_loaded
        async with models.use("a") as model:  # the server goes on
            assert model.engine.is_ready
    finally:
        await asyncio.to_thread(models.shutdown)


def test_models_that_cannot_fit_together_are_refused_at_start_up(tmp_path: Path) -> None:
    from wde.config import EngineConfig

    configs: list[tuple[str, EngineConfig]] = []
    for name, size in (("small", 1_000_000), ("large", 50_000_000)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"\0" * size)
        model_config = SimpleNamespace(
            model=str(folder), dtype="float32", quantization=None, hf_config={"hidden_size": 64}
        )
        configs.append(
            (
                name,
                SimpleNamespace(
                    model_config=model_config, scheduler_config=SimpleNamespace(max_num_batched_tokens=64)
                ),
            )
        )
    check_models_fit(configs, 2, available=60_000_000)  # ~51 MB of weights + small batches: fits
    with pytest.raises(ValueError, match=r"cannot be loaded together.*large 0\.05 GiB.*--max-loaded-models"):
        check_models_fit(configs, 2, available=40_000_000)
    check_models_fit(configs, 1, available=55_000_000)  # one at a time: only the largest must fit


def test_models_file_gives_each_model_its_flags(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(
        "models:\n  - model: /m/a\n    served_model_name: a\n"
        "  - model: /m/b\n    max_num_batched_tokens: 512\n"
    )
    base = EngineArgs(max_num_batched_tokens=2048, dtype="float32")
    first, second = read_models_file(str(path), base)
    assert (first.model, first.served_model_name, first.max_num_batched_tokens) == ("/m/a", "a", 2048)
    assert (second.model, second.max_num_batched_tokens, second.dtype) == ("/m/b", 512, "float32")
    path.write_text("models:\n  - model: /m/a\n    num_gpus: 2\n")
    with pytest.raises(ValueError, match=r"models\[0\]: unknown keys \['num_gpus'\]"):
        read_models_file(str(path), base)
    path.write_text("models: []\n")
    with pytest.raises(ValueError, match="'models:' list"):
        read_models_file(str(path), base)
