"""Captures and replays CUDA graphs of the model's forward pass over a padded flat batch.

Static device buffers (input ids, positions, token types, cu_seqlens) are sized for the largest bucket and
``max_num_seqs``; a replay copies the batch in, pads the token rows with zeros, and marks every unused
sequence slot as empty (cu_seqlens repeats the real token count), so padded rows belong to no sequence and
never reach a real token's attention. Only varlen backends with static metadata can be captured
(``AttentionBackend.supports_cuda_graphs``: flash_attn, torch_varlen). The pooler runs outside the graph.
A model with LoRA task adapters is captured with a static per-token adapter buffer (the rows-of-several-
tasks path, ``wde/layers/lora.py``), so one graph serves any mix of tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from wde.config import NO_ADAPTER
from wde.layers.attention.backend import AttentionMetadata
from wde.layers.forward_context import set_forward_context
from wde.layers.lora import TokenAdapters

if TYPE_CHECKING:
    from wde.worker.input_batch import InputBatch
    from wde.worker.model_runner import ModelRunnerBase

NUM_WARMUP_RUNS = 2


@dataclass
class CapturedGraph:
    graph: torch.cuda.CUDAGraph
    output: torch.Tensor  # [bucket, hidden_size], overwritten by every replay


class TorchCudaGraphCapturer:
    def __init__(self, runner: ModelRunnerBase, max_num_tokens: int, max_num_seqs: int) -> None:
        if runner.model is None:
            raise RuntimeError("graphs are captured after load_model()")
        self.model = runner.model
        self.device = runner.device
        self.max_model_len = runner.model_config.max_model_len
        self.input_ids = torch.zeros(max_num_tokens, dtype=torch.int64, device=self.device)
        self.positions = torch.zeros(max_num_tokens, dtype=torch.int64, device=self.device)
        self.token_type_ids = torch.zeros(max_num_tokens, dtype=torch.int64, device=self.device)
        self.cu_seqlens = torch.zeros(max_num_seqs + 1, dtype=torch.int32, device=self.device)
        # each token's task adapter, for a model that has them (None: the batch carries none)
        self.adapter_ids: torch.Tensor | None = None
        task_adapters = runner.model_config.task_adapters
        self.default_adapter = NO_ADAPTER if task_adapters is None else task_adapters.index(None)
        if task_adapters is not None:
            self.adapter_ids = torch.full(
                (max_num_tokens,), NO_ADAPTER, dtype=torch.int64, device=self.device
            )
        self.metadata = AttentionMetadata(
            seq_lens=[], cu_seqlens=self.cu_seqlens, max_seqlen=self.max_model_len
        )
        self.pool: Any = None  # shared by every graph: the largest, captured first, sizes it

    def memory_bytes(self) -> int:
        return torch.cuda.memory_reserved(self.device)

    def capture(self, num_tokens: int) -> CapturedGraph:
        # 1. plausible contents: sequences of max_model_len tokens (values are rewritten before each replay)
        starts = torch.arange(self.cu_seqlens.shape[0], device=self.device) * self.max_model_len
        self.cu_seqlens.copy_(starts.clamp(max=num_tokens))
        self.positions[:num_tokens].copy_(torch.arange(num_tokens, device=self.device) % self.max_model_len)
        # 2. warm up on a side stream, then capture into the shared pool
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(NUM_WARMUP_RUNS):
                self._forward(num_tokens)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # thread_local: a lazy capture runs on the forward thread while the engine thread builds the next
        # batch (pinned copies, allocations); "global" would forbid those CUDA calls for the whole capture
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            output = self._forward(num_tokens)
        if self.pool is None:
            self.pool = graph.pool()
        return CapturedGraph(graph, output)

    def replay(self, bucket_and_graph: tuple[int, CapturedGraph], batch: InputBatch) -> torch.Tensor:
        bucket, captured = bucket_and_graph
        num_tokens, num_seqs = batch.num_tokens, batch.attn_metadata.num_seqs
        # 1. copy the batch into the static buffers; padded rows get token 0 at position 0
        for static, value in (
            (self.input_ids, batch.input_ids),
            (self.positions, batch.positions),
            (self.token_type_ids, batch.token_type_ids),
        ):
            if value is None:
                static[:num_tokens].zero_()
            else:
                static[:num_tokens].copy_(value, non_blocking=True)
            static[num_tokens:bucket].zero_()
        self.cu_seqlens[: num_seqs + 1].copy_(batch.attn_metadata.cu_seqlens, non_blocking=True)
        self.cu_seqlens[num_seqs + 1 :].fill_(num_tokens)  # unused slots: empty sequences
        if self.adapter_ids is not None:
            self._copy_adapters(batch.adapters, num_tokens, bucket)
        # 2. replay; the real rows of the static output are the batch's hidden states
        captured.graph.replay()
        return captured.output[:num_tokens]

    def _copy_adapters(self, adapters: TokenAdapters | None, num_tokens: int, bucket: int) -> None:
        """The batch's per-token adapters into the static buffer; padded rows run with none."""
        assert self.adapter_ids is not None
        if adapters is not None and adapters.ids is not None:
            self.adapter_ids[:num_tokens].copy_(adapters.ids[:num_tokens], non_blocking=True)
        else:
            single = self.default_adapter if adapters is None else adapters.single
            self.adapter_ids[:num_tokens].fill_(NO_ADAPTER if single is None else single)
        self.adapter_ids[num_tokens:bucket].fill_(NO_ADAPTER)

    def _forward(self, num_tokens: int) -> torch.Tensor:
        adapters = None if self.adapter_ids is None else TokenAdapters(ids=self.adapter_ids[:num_tokens])
        with set_forward_context(self.metadata, adapters):
            return self.model(
                self.input_ids[:num_tokens], self.positions[:num_tokens], self.token_type_ids[:num_tokens]
            )
