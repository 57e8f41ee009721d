"""The flat batch a forward pass runs on: all sequences' tokens back to back, no padding between them; on
CPU, dummy sequences after them may round the token count up to a row bucket (wde/worker/row_buckets.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import torch

from wde.config import TaskAdapters
from wde.inputs import PoolingParams
from wde.layers.attention.backend import AttentionBackend, AttentionMetadata
from wde.layers.host_copy import host_to_device
from wde.layers.lora import TokenAdapters
from wde.layers.pooler.methods import PoolingMetadata
from wde.request import Request
from wde.tokenizer import TokenIds


@dataclass
class InputBatch:
    request_ids: list[str]
    input_ids: torch.Tensor  # [num_tokens] int64
    positions: torch.Tensor  # [num_tokens] int64, 0-based within each sequence
    token_type_ids: torch.Tensor | None  # [num_tokens] int64, None when every request is single-segment
    attn_metadata: AttentionMetadata
    pooling_metadata: PoolingMetadata
    params: list[PoolingParams]  # per request, in batch order
    # dummy tokens after the real ones (sequences of their own, for a row bucket), dropped before pooling
    num_padding_tokens: int = 0
    # each token's LoRA task adapter, for a model that has them (``ModelConfig.task_adapters``); else None
    adapters: TokenAdapters | None = None

    @property
    def num_tokens(self) -> int:
        """The real tokens: the model runs on ``num_tokens + num_padding_tokens`` rows."""
        return self.input_ids.shape[0] - self.num_padding_tokens

    @classmethod
    def build(
        cls,
        requests: list[Request],
        backend_cls: type[AttentionBackend],
        device: torch.device,
        padding_lens: list[int] | None = None,
        task_adapters: TaskAdapters | None = None,
    ) -> InputBatch:
        """``padding_lens``: dummy sequences (token id 0, positions from 0, fully attended) after the
        requests', so that the model runs on a row bucket (``wde/worker/row_buckets.py``).
        ``task_adapters``: the model's LoRA task adapters, each request's chosen by its ``prompt_name``."""
        real_lens = [request.num_tokens for request in requests]
        num_tokens = sum(real_lens)
        padding_lens = padding_lens or []
        seq_lens = real_lens + padding_lens
        num_rows = num_tokens + sum(padding_lens)
        # 1. token ids, back to back (dummy sequences: zeros)
        input_ids = np.zeros(num_rows, np.int64)
        input_ids[:num_tokens] = _flat_ids([request.token_ids for request in requests], num_tokens)
        # 2. positions restart at 0 for every sequence
        lens = np.asarray(seq_lens, dtype=np.int64)
        starts = np.cumsum(lens) - lens
        positions = np.arange(num_rows, dtype=np.int64) - np.repeat(starts, lens)
        # 3. segment ids only where some request has a second segment
        token_type_ids = None
        if any(_any_nonzero(request.token_type_ids) for request in requests):
            type_ids = np.zeros(num_rows, np.int64)
            type_id_lists = [
                [0] * request.num_tokens if request.token_type_ids is None else request.token_type_ids
                for request in requests
            ]
            type_ids[:num_tokens] = _flat_ids(type_id_lists, num_tokens)
            token_type_ids = host_to_device(type_ids, device)
        input_ids_on_device = host_to_device(input_ids, device)
        num_keys = _num_keys(requests)
        # 4. each token's task adapter, where the model has them
        adapters = None
        if task_adapters is not None:
            indices = [task_adapters.index(request.params.prompt_name) for request in requests]
            adapters = TokenAdapters.of_sequences(indices, real_lens, padding_lens, device)
        return cls(
            request_ids=[request.request_id for request in requests],
            input_ids=input_ids_on_device,
            positions=host_to_device(positions, device),
            token_type_ids=token_type_ids,
            attn_metadata=backend_cls.build_metadata(
                seq_lens, device, None if num_keys is None else num_keys + padding_lens
            ),
            pooling_metadata=PoolingMetadata.from_seq_lens(
                real_lens, device, input_ids_on_device[:num_tokens]
            ),
            params=[request.params for request in requests],
            num_padding_tokens=num_rows - num_tokens,
            adapters=adapters,
        )


def _flat_ids(id_lists: Sequence[TokenIds | None], num_tokens: int) -> np.ndarray:
    """The sequences' ids back to back: arrays (checked or tokenized in a process) are concatenated, lists
    walked in C (all in one walk when there is no array); every sequence has ids here."""
    num_arrays = sum(isinstance(ids, np.ndarray) for ids in id_lists)
    if num_arrays == 0:
        return np.fromiter(chain.from_iterable(id_lists), np.int64, num_tokens)  # type: ignore[arg-type]
    if num_arrays < len(id_lists):  # a numpy array walked item by item would cost 3x a list
        as_arrays = [ids if isinstance(ids, np.ndarray) else np.asarray(ids, np.int64) for ids in id_lists]
        return np.concatenate(as_arrays)
    return np.concatenate(id_lists)  # type: ignore[arg-type]


def _any_nonzero(ids: TokenIds | None) -> bool:
    if ids is None:
        return False
    return bool(ids.any()) if isinstance(ids, np.ndarray) else any(ids)


def _num_keys(requests: list[Request]) -> list[int] | None:
    """Per sequence its attended tokens, when some request has tokens that are not attended to."""
    if not any(request.num_unattended_tokens for request in requests):
        return None
    return [request.num_tokens - request.num_unattended_tokens for request in requests]
