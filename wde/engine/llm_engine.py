"""The engine loop for callers who drive it: ``add_request`` / ``step`` / ``abort_request``.

Built from a Workflow (the stage classes for the model's task) and an executor over a model runner.
This module does not import torch: the runner is created through the platform at build time.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from wde.config import EngineConfig, SchedulerConfig
from wde.engine.executor import EXECUTORS, BatchResult, Executor, ModelRunner
from wde.engine.forward_clock import ForwardClock
from wde.engine.memory_trimmer import MemoryTrimmer
from wde.engine.scheduler import SchedulerOutput
from wde.engine.stats import BatchStats, StepStats
from wde.engine.tokenizer_pool import EncoderPool, TokenizerPool
from wde.engine.workflow import Workflow, get_workflow
from wde.inputs import PoolingParams, PromptType, TextPair
from wde.outputs import RequestOutput
from wde.request import PRIORITY_INTERACTIVE, Request, RequestStatus
from wde.tokenizer import Tokenizer

logger = logging.getLogger(__name__)


class LLMEngine:
    def __init__(
        self,
        engine_config: EngineConfig,
        workflow: Workflow,
        tokenizer: Tokenizer,
        runner: ModelRunner,
        is_padded: bool,
        use_pool: bool = False,
    ) -> None:
        """``use_pool``: tokenize ahead on ``tokenizer_processes`` processes, else on ``tokenizer_workers``
        threads, where there are any (``from_engine_config`` asks for it)."""
        self.engine_config = engine_config
        self.model_config = engine_config.model_config
        self.workflow = workflow
        self.tokenizer = tokenizer
        self.runner = runner
        self.input_processor = workflow.input_processor(self.model_config)
        pool = _tokenizer_pool(engine_config.scheduler_config, tokenizer) if use_pool else None
        self.request_processor = workflow.request_processor(self.model_config, tokenizer, pool)
        self.scheduler = workflow.scheduler(engine_config.scheduler_config, self.request_processor, is_padded)
        self.executor: Executor = EXECUTORS[engine_config.device_config.executor](runner)
        self.output_processor = workflow.output_processor()
        self.requests: dict[str, Request] = {}
        self.last_step_stats: StepStats | None = None
        self.memory_trimmer = MemoryTrimmer()

    @classmethod
    def from_engine_args(cls, engine_args: Any) -> LLMEngine:
        """The engine for ``EngineArgs`` (its config built here)."""
        return cls.from_engine_config(engine_args.create_engine_config())

    @classmethod
    def from_engine_config(cls, engine_config: EngineConfig) -> LLMEngine:
        """The engine for a built config (``wde serve`` builds each once and hands it here); the config is
        not changed: the engine keeps a copy with the token budget its runner chose."""
        from wde.platforms import get_platform
        from wde.worker.runners import model_runner_cls

        model_config = engine_config.model_config
        platform = get_platform(engine_config.device_config.device)
        tokenizer = Tokenizer.of_model(model_config)
        runner = model_runner_cls(platform.device_type)(engine_config, platform)
        budget = runner.initialize()
        backend = runner.attn_backend_cls
        if backend is None:
            raise RuntimeError("the model runner chose no attention backend while loading the model")
        scheduler_config = engine_config.scheduler_config.with_budget(
            budget.max_num_batched_tokens, budget.reason
        )
        engine_config = dataclasses.replace(engine_config, scheduler_config=scheduler_config)
        logger.info(
            "engine ready: task=%s dtype=%s quantization=%s backend=%s max_model_len=%d "
            "max_num_batched_tokens=%d max_num_seqs=%d executor=%s",
            model_config.task,
            model_config.dtype,
            model_config.quantization or "none",
            backend.name,
            model_config.max_model_len,
            scheduler_config.max_num_batched_tokens,
            scheduler_config.max_num_seqs,
            engine_config.device_config.executor,
        )
        workflow = get_workflow(model_config.task)
        return cls(engine_config, workflow, tokenizer, runner, backend.is_padded, use_pool=True)

    # ---- requests in and out ----------------------------------------------------------------------
    def add_requests(
        self,
        request_ids: Sequence[str],
        prompts: Sequence[PromptType | TextPair],  # pairs: a cross-encoder's (text_1, text_2)
        params: PoolingParams | None = None,
        *,
        priority: int = PRIORITY_INTERACTIVE,
        arrival_time: float | None = None,
    ) -> None:
        """Validate every input first, then queue them all: a bad input leaves the queue untouched.
        ``priority``: lower runs first (``wde.request.PRIORITY_BATCH`` waits for interactive requests).
        ``arrival_time``: when the caller submitted them (``time.monotonic()``; default: now)."""
        for request_id in request_ids:
            if request_id in self.requests:
                raise ValueError(f"request id {request_id!r} is already in the engine")
        if len(set(request_ids)) != len(request_ids):
            raise ValueError("request ids of one call must be distinct")
        requests = self.input_processor.process(request_ids, prompts, params or PoolingParams())
        for request in requests:
            request.priority = priority
            if arrival_time is not None:
                request.arrival_time = arrival_time
            self.requests[request.request_id] = request
            self.scheduler.add_request(request)

    def add_prepared(self, requests: Sequence[Request]) -> None:
        """Queue requests another process validated and tokenized (``RequestPreparer``: ready, with their
        priority and arrival time set); the ids must be new."""
        for request in requests:
            if request.request_id in self.requests:
                raise ValueError(f"request id {request.request_id!r} is already in the engine")
        for request in requests:
            self.requests[request.request_id] = request
            self.scheduler.add_request(request)

    def add_request(self, request_id: str, prompt: PromptType, params: PoolingParams | None = None) -> None:
        self.add_requests([request_id], [prompt], params)

    def abort_request(self, request_id: str) -> bool:
        """Drop a request: removed from the queue, or its result discarded if it is already running."""
        request = self.requests.pop(request_id, None)
        if request is None:
            return False
        if not self.scheduler.abort_request(request):
            request.status = RequestStatus.ABORTED
        return True

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests) or self.executor.has_in_flight()

    def get_num_unfinished_requests(self) -> int:
        return len(self.requests)

    @property
    def num_waiting(self) -> int:
        """Requests queued in the scheduler (not yet in a batch)."""
        return self.scheduler.num_waiting

    def capture_while_idle(self, is_idle: Callable[[], bool]) -> int:
        """Idle-mode CUDA graphs: capture pending buckets while ``is_idle()`` and nothing runs."""
        if self.has_unfinished_requests():
            return 0
        return self.runner.capture_while_idle(is_idle)

    def has_pending_captures(self) -> bool:
        return self.runner.has_pending_captures()

    def hold_seconds(self) -> float | None:
        """None when a step would do work now; else how long the waiting lower-priority work is held off
        for a likely interactive request (the loop waits that long for new requests, then steps)."""
        if self.executor.has_in_flight():
            return None  # a step collects its results
        seconds = self.scheduler.hold_seconds()
        return seconds if seconds > 0 else None

    def on_idle(self) -> float | None:
        """Call when nothing is left to run: gives the OS back the heap pages large batches left behind
        (glibc ``malloc_trim``, rate-limited by ``MemoryTrimmer``; never per step). Returns None, or the
        seconds after which to call again (still idle) for a trim that the rate limit deferred."""
        return self.memory_trimmer.on_idle()

    @property
    def forward_clock(self) -> ForwardClock:
        """How long the running forward pass has taken; safe to read from any thread (the watchdog)."""
        return self.executor.clock

    # ---- the loop ---------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        # 1. schedule: tokenize the front of the queue, pick a batch within the budget
        scheduler_output = self.scheduler.schedule()
        # 2. execute: run it (inline, or on the worker while we come back for the next one)
        results = self.executor.execute_model(scheduler_output.scheduled_requests)
        # 3. process outputs: one per finished request
        outputs = self.output_processor.process(results, scheduler_output.failed_requests)
        self.scheduler.finish(request for result in results for request in result.requests)
        for output in outputs:
            self.requests.pop(output.request_id, None)
        self.last_step_stats = self._step_stats(scheduler_output, results)
        self.memory_trimmer.note_tokens(self.last_step_stats.num_scheduled_tokens)
        return outputs

    def _step_stats(self, scheduler_output: SchedulerOutput, results: list[BatchResult]) -> StepStats:
        scheduled = scheduler_output.scheduled_requests
        return StepStats(
            num_waiting=self.scheduler.num_waiting,
            num_scheduled_seqs=len(scheduled),
            num_scheduled_tokens=sum(request.num_tokens for request in scheduled),
            num_tokenized=scheduler_output.num_tokenized,
            tokenize_seconds=scheduler_output.tokenize_seconds,
            finished_batches=[
                BatchStats(
                    len(result.requests),
                    sum(request.num_tokens for request in result.requests),
                    result.execute_seconds,
                    result.execute_cpu_seconds,
                    result.device_seconds,
                )
                for result in results
            ],
        )

    def shutdown(self) -> None:
        self.executor.shutdown()
        self.request_processor.shutdown()


def _tokenizer_pool(scheduler_config: SchedulerConfig, tokenizer: Tokenizer) -> EncoderPool | None:
    if scheduler_config.tokenizer_processes > 0:
        from wde.engine.tokenizer_processes import TokenizerProcesses  # pyzmq: SchedulerConfig.verify

        return TokenizerProcesses(scheduler_config.tokenizer_processes, tokenizer)
    if scheduler_config.tokenizer_workers > 0:
        return TokenizerPool(scheduler_config.tokenizer_workers, tokenizer)
    return None
