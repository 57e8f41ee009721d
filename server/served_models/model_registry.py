"""``ModelRegistry``: the models one server serves, each with its own engine, picked per request by name.

- A request names its model (OpenAI / Cohere ``model``; the TEI routes take an optional ``model`` field as
  well). Without one it goes to the first listed model whose task serves the route (embedding routes: an
  embedding model; /rerank, /predict: a cross-encoder), else to the first model. An unknown name is a 404
  naming the served ones; a server of ONE model answers any name (as TEI does) unless
  --strict-model-name.
- ``--max-loaded-models N``: at most N engines are loaded. A request for an unloaded model queues (holding
  its admission slot); swaps go by queue (``server/served_models/swap_policy.py``): the loaded models serve
  their own requests first, and the model with the oldest queued request loads when a loaded one drains, or
  when that request has waited --max-swap-wait (the loaded model then finishes the requests it holds and
  unloads, once it has been loaded --min-model-residency). One swap at a time, in a task of its own (a
  client leaving does not cut a load short). A model that fails to load answers 503 naming it and the
  error to the requests queued for it; the next request for it tries again. The longest wait, as a formula
  of the flags and the load time, is in ``server/served_models/swap_policy.py``; the clock and the engine's
  start and stop (``_start_engine``, ``_stop_engine``) are the seams its virtual-clock test drives.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from server.errors import ModelNotFoundError
from server.process.heap_freeze import frozen_after, thaw_heap
from server.served_models.model_memory import check_models_fit
from server.served_models.reached_model import note_reached_model
from server.served_models.swap_policy import SwapPlan, SwapTiming, plan_swap
from wde.config import EngineConfig, ModelConfig
from wde.engine.llm_engine import LLMEngine
from wde.engine_args import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.engine_thread import EngineUnavailableError
from wde.entrypoints.output_precision import Calibration

logger = logging.getLogger("wde.server")

EngineHook = Callable[["ServedModel", AsyncLLMEngine], None]

# The task whose models serve a route by default: "embed" (embedding models) or "score" (cross-encoders).
EMBED, SCORE = "embed", "score"


@dataclass(eq=False)
class ServedModel:
    engine_args: EngineArgs
    engine: AsyncLLMEngine | None = None  # None while unloaded
    # the resolved configuration (name, task, limits) when known before loading: a multi-model server
    # reads it at start-up, to route and to answer /v1/models and /info without loading
    config: EngineConfig | None = None
    num_in_use: int = 0  # requests holding this model (``ModelRegistry.use``)
    last_used: float = field(default_factory=time.monotonic)
    num_loads: int = 0
    evicting: bool = False  # chosen to be unloaded: new requests wait for the next load
    waiting: deque[float] = field(default_factory=deque)  # arrival times of the requests queued for it
    loaded_at: float = field(default_factory=time.monotonic)  # when its engine became ready
    idle_since: float = field(default_factory=time.monotonic)  # when its last request let go of it
    load_seconds: float = 0.0  # how long its last load took (its engine made to ready; logged)
    # its int8 / uint8 calibration, kept across loads: a swap back does not embed the texts again
    calibration: Calibration | None = None
    # (when, error) of its last failed load: the requests queued before then are answered the error
    load_failure: tuple[float, EngineUnavailableError] | None = None

    @property
    def model_config(self) -> ModelConfig | None:
        """The model's configuration: read at start-up, else its loaded engine's (None while loading)."""
        if self.config is not None:
            return self.config.model_config
        if self.engine is not None and self.engine.is_ready:
            return self.engine.info.model_config
        return None

    @property
    def name(self) -> str:
        """The served name: --served-model-name, else the model as given (the bundled model's hub id)."""
        model_config = self.model_config
        if self.engine_args.served_model_name or model_config is None:
            return self.engine_args.served_model_name or self.engine_args.model or "default"
        return model_config.served_model_name or model_config.model

    @property
    def task(self) -> str | None:
        model_config = self.model_config
        return None if model_config is None else model_config.task

    @property
    def is_loaded(self) -> bool:
        return self.engine is not None

    @property
    def loaded_engine(self) -> AsyncLLMEngine:
        """The engine of a loaded model (``ModelRegistry.use`` holds it loaded)."""
        if self.engine is None:
            raise EngineUnavailableError(f"model {self.name!r} is not loaded")
        return self.engine


class ModelRegistry:
    def __init__(
        self,
        models: Sequence[ServedModel],
        max_loaded_models: int | None = None,
        make_engine: Callable[[EngineArgs], AsyncLLMEngine] | None = None,
        strict_names: bool = False,
        swap_timing: SwapTiming | None = None,
        clock: Callable[[], float] = time.monotonic,
        freeze_heap: bool = False,
    ) -> None:
        """``freeze_heap``: each engine this registry makes freezes the heap once loaded; the heap is thawed
        once an engine is unloaded and at shutdown (``server/process/heap_freeze.py``; server processes
        only)."""
        if not models:
            raise ValueError("no model to serve; name one (wde serve MODEL) or leave it out for the default")
        if max_loaded_models is not None and max_loaded_models < 1:
            raise ValueError(f"max_loaded_models must be >= 1, got {max_loaded_models}")
        self.models = list(models)
        names = [model.name for model in self.models]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(
                f"two models are served as {duplicates}; give each its own served_model_name (models.yaml)"
            )
        self.max_loaded_models = max_loaded_models or len(self.models)
        self.make_engine = make_engine
        self.strict_names = strict_names
        self.swap_timing = swap_timing or SwapTiming()
        self.clock = clock  # monotonic seconds: the queue's arrival times, loads, residencies
        self.freeze_heap = freeze_heap
        self._engine_hooks: list[EngineHook] = []
        self._swap_task: asyncio.Task[None] | None = None  # the one swap (unload, load) under way
        self._changed = asyncio.Event()  # set (and replaced) when a swap may have become due or done

    @classmethod
    def from_engine_args(
        cls,
        engine_args: Sequence[EngineArgs],
        max_loaded_models: int | None = None,
        strict_names: bool = False,
        available_bytes: int | None = None,
        swap_timing: SwapTiming | None = None,
        freeze_heap: bool = False,
    ) -> ModelRegistry:
        """The models, their configurations read (names, tasks; raises ValueError for a bad folder or
        flag) and, with several, checked to fit in memory together (``model_memory``)."""
        served = [(args, args.create_engine_config()) for args in engine_args]
        return cls.from_configs(
            served, max_loaded_models, strict_names, available_bytes, swap_timing, freeze_heap
        )

    @classmethod
    def from_configs(
        cls,
        served: Sequence[tuple[EngineArgs, EngineConfig]],
        max_loaded_models: int | None = None,
        strict_names: bool = False,
        available_bytes: int | None = None,
        swap_timing: SwapTiming | None = None,
        freeze_heap: bool = False,
    ) -> ModelRegistry:
        """The models of configurations already built (``wde serve`` builds each once): each engine is
        made from its model's config; with several, checked to fit in memory together."""
        models = [ServedModel(args, config=config) for args, config in served]
        if len(models) > 1:
            check_models_fit(
                [(model.name, config) for model, (_, config) in zip(models, served, strict=True)],
                max_loaded_models or len(models),
                available_bytes,
            )
        return cls(
            models,
            max_loaded_models,
            strict_names=strict_names,
            swap_timing=swap_timing,
            freeze_heap=freeze_heap,
        )

    @classmethod
    def of_engine(cls, engine: AsyncLLMEngine, strict_names: bool = False) -> ModelRegistry:
        """One model, its engine made by the caller."""
        return cls([ServedModel(engine.engine_args, engine)], strict_names=strict_names)

    @property
    def default(self) -> ServedModel:
        return self.models[0]

    @property
    def is_multi_model(self) -> bool:
        return len(self.models) > 1

    @property
    def takes_turns(self) -> bool:
        """Fewer slots than models (--max-loaded-models): the models are loaded and unloaded on demand."""
        return self.max_loaded_models < len(self.models)

    @property
    def names(self) -> list[str]:
        return [model.name for model in self.models]

    def loaded(self) -> list[ServedModel]:
        return [model for model in self.models if model.is_loaded]

    def add_engine_hook(self, hook: EngineHook) -> None:
        """Call ``hook(model, engine)`` for every engine: the loaded ones now, each one made later before
        it starts (metrics listeners, tracing)."""
        self._engine_hooks.append(hook)
        for model in self.loaded():
            hook(model, model.loaded_engine)

    def wait_until_ready(self, timeout: float | None = None) -> None:
        """Block until every loaded engine is ready (raises as ``AsyncLLMEngine.wait_until_ready``)."""
        for model in self.loaded():
            engine = model.engine
            if engine is not None and not model.evicting:
                engine.wait_until_ready(timeout)

    # ---- routing ----------------------------------------------------------------------------------
    def resolve(self, name: str | None, task: str | None = None) -> ServedModel:
        """The model a request names; without a name the first serving ``task`` (else the first)."""
        if name is None:
            if task is None:
                return self.default
            return next((model for model in self.models if model.task == task), self.default)
        for model in self.models:
            if model.name == name:
                return model
        if not self.is_multi_model and not self.strict_names:
            return self.default  # one model: a client's default name ("rerank-v3.5") reaches it, as in TEI
        served = ", ".join(repr(served_name) for served_name in self.names)
        hint = " (--strict-model-name is on)" if not self.is_multi_model else ""
        raise ModelNotFoundError(
            f"model {name!r} is not served here; this server serves {served} (GET /v1/models){hint}"
        )

    @asynccontextmanager
    async def use(self, name: str | None, task: str | None = None) -> AsyncIterator[ServedModel]:
        """The model, loaded, held (not unloaded) until the block ends."""
        model = self.resolve(name, task)
        note_reached_model(model.name)  # the HTTP metrics' model label
        async with self.hold(model):
            yield model

    @asynccontextmanager
    async def hold(self, model: ServedModel) -> AsyncIterator[ServedModel]:
        """``model`` (one of ``models``), loaded, held until the block ends: its turn waited for first."""
        if not _usable(model):
            await self._wait_for_turn(model)
        if model.engine is not None:  # a model still loading (the server's start): a moment's grace first
            await model.engine.wait_while_loading()
        model.num_in_use += 1
        model.last_used = self.clock()
        try:
            yield model
        finally:
            model.num_in_use -= 1
            if model.num_in_use == 0:
                model.idle_since = self.clock()
                self._notify()  # drained (after the grace): a queued model may load

    # ---- the queue --------------------------------------------------------------------------------------
    async def _wait_for_turn(self, model: ServedModel) -> None:
        """Queue for ``model`` until it is loaded and takes requests; start each swap that falls due."""
        arrival = self.clock()
        model.waiting.append(arrival)
        try:
            while not _usable(model):
                failure = model.load_failure
                if failure is not None and failure[0] >= arrival:
                    raise failure[1]
                changed = self._changed
                recheck_at = self._start_due_swap()
                timeout = None if recheck_at is None else max(recheck_at - self.clock(), 0.0)
                with contextlib.suppress(TimeoutError):  # the bounded wait or a residency ran out: look again
                    await asyncio.wait_for(changed.wait(), timeout)
        finally:
            if arrival in model.waiting:  # (a failed load empties the queue)
                model.waiting.remove(arrival)
            self._notify()  # the queue's head may have changed

    def _start_due_swap(self) -> float | None:
        """Start the swap ``plan_swap`` says is due (none while one is under way); else when to look again."""
        if self._swap_task is not None:
            return None
        plan, recheck_at = plan_swap(self.models, self.max_loaded_models, self.swap_timing, self.clock())
        if plan is not None:
            if isinstance(plan.victim, ServedModel):
                plan.victim.evicting = True  # from now on, not when the task first runs: its requests queue
            self._swap_task = asyncio.create_task(self._swap(plan), name="wde-model-swap")
        return recheck_at

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _swap(self, plan: SwapPlan) -> None:
        model, victim = plan.model, plan.victim
        assert isinstance(model, ServedModel) and (victim is None or isinstance(victim, ServedModel))
        try:
            if victim is not None:
                await self._unload(victim, model, plan.reason)
            await self._load(model)
        except EngineUnavailableError as e:
            # the requests queued until now get the error (and leave the queue: no retry for them)
            model.load_failure = (self.clock(), e)
            model.waiting.clear()
        except Exception:
            logger.exception("swapping in %s failed", model.name)
        finally:
            self._swap_task = None
            self._notify()

    # ---- loading and unloading --------------------------------------------------------------------
    def start(self) -> None:
        """Make and start the engines of the first ``max_loaded_models`` models (each loads on its own
        thread); engines made by the caller are started as well."""
        for model in self.models[: self.max_loaded_models]:
            if model.engine is None:
                model.engine = self._new_engine(model)
                model.num_loads += 1
        for model in self.loaded():
            model.loaded_engine.start()  # idempotent
            model.loaded_at = model.idle_since = self.clock()

    def shutdown(self) -> None:
        """Drain and stop every loaded engine (blocking: call from a worker thread)."""
        for model in self.loaded():
            model.loaded_engine.shutdown()
        if self.freeze_heap:
            thaw_heap()  # the stopped engines' cycles collectable (a process that goes on: in-process serve)

    async def _unload(self, victim: ServedModel, model: ServedModel, reason: str) -> None:
        """Stop ``victim`` taking requests (``_start_due_swap`` set ``evicting``), let the ones it holds
        finish, and unload it."""
        victim.evicting = True
        try:
            start = self.clock()
            num_in_flight = victim.num_in_use
            while victim.num_in_use > 0:
                await self._changed.wait()
            drained = self.clock()
            engine, victim.engine = victim.engine, None
            if engine is not None:
                await self._stop_engine(engine)
                if self.freeze_heap:
                    thaw_heap()  # its cycles collectable again; the next load collects and freezes
            logger.info(
                "unloaded %s (%s) to load %s in %.2f s: its %d requests in flight finished in %.2f s "
                "(--max-loaded-models %d; %d requests queued for %s, %d for %s)",
                victim.name,
                reason,
                model.name,
                self.clock() - start,
                num_in_flight,
                drained - start,
                self.max_loaded_models,
                len(model.waiting),
                model.name,
                len(victim.waiting),
                victim.name,
            )
        finally:
            victim.evicting = False

    async def _load(self, model: ServedModel) -> None:
        start = self.clock()
        logger.info("loading %s", model.name)
        model.num_loads += 1
        engine = await self._start_engine(model)
        model.engine = engine
        model.loaded_at = self.clock()
        model.load_seconds = model.loaded_at - start
        model.load_failure = None
        logger.info(
            "loaded %s in %.2f s (%d requests queued for it)",
            model.name,
            model.load_seconds,
            len(model.waiting),
        )

    async def _start_engine(self, model: ServedModel) -> AsyncLLMEngine:
        """A new engine for ``model``, started and ready (raises ``EngineUnavailableError``)."""
        engine = self._new_engine(model)
        engine.start()
        try:
            await asyncio.to_thread(engine.wait_until_ready)
        except Exception as e:
            await asyncio.to_thread(engine.shutdown)
            raise EngineUnavailableError(f"model {model.name!r} failed to load: {e}") from e
        return engine

    async def _stop_engine(self, engine: AsyncLLMEngine) -> None:
        await asyncio.to_thread(engine.shutdown)

    def _new_engine(self, model: ServedModel) -> AsyncLLMEngine:
        if self.make_engine is not None:
            engine = self.make_engine(model.engine_args)
        else:  # the config read at start-up, not built again
            build = (
                functools.partial(LLMEngine.from_engine_config, model.config)
                if model.config is not None
                else functools.partial(LLMEngine.from_engine_args, model.engine_args)
            )
            # its int8 / uint8 ranges for requests with no option computed before it says ready
            engine = AsyncLLMEngine(
                model.engine_args,
                frozen_after(build) if self.freeze_heap else build,
                calibrate_at_load=True,
                calibration=model.calibration,
            )
            model.calibration = engine.calibration
        for hook in self._engine_hooks:
            hook(model, engine)
        return engine


def _usable(model: ServedModel) -> bool:
    """Loaded and taking requests (not being unloaded)."""
    return model.is_loaded and not model.evicting
