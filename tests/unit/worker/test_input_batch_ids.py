"""The batch's flat token ids and segment ids are the same whether each request holds a list (the in-process
tokenizer), an array view (checked token ids, a tokenizer process's output) or a mix of both."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wde.layers.attention.backends.naive import NaiveBackend
from wde.request import Request

IDS = [[101, 7, 8, 102], [101, 9, 102], [101, 5, 6, 7, 102]]
TYPE_IDS = [None, None, [0, 0, 0, 1, 1]]


def _requests(as_array: list[bool]) -> list[Request]:
    requests = []
    for index, (ids, type_ids, array) in enumerate(zip(IDS, TYPE_IDS, as_array, strict=True)):
        token_ids = np.asarray(ids, np.int32) if array else list(ids)
        types = None if type_ids is None else (np.asarray(type_ids, np.int32) if array else list(type_ids))
        requests.append(Request(f"r{index}", token_ids=token_ids, token_type_ids=types))
    return requests


@pytest.mark.parametrize("as_array", [[False] * 3, [True] * 3, [True, False, True], [False, True, False]])
def test_lists_arrays_and_mixes_give_one_batch(as_array: list[bool]) -> None:
    from wde.worker.input_batch import InputBatch

    batch = InputBatch.build(_requests(as_array), NaiveBackend, torch.device("cpu"))
    assert batch.input_ids.tolist() == [token for ids in IDS for token in ids]
    assert batch.input_ids.dtype == torch.int64
    assert batch.token_type_ids is not None
    assert batch.token_type_ids.tolist() == [0] * 7 + TYPE_IDS[2]  # type: ignore[operator]
