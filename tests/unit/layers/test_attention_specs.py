"""Every CPU attention backend honours every spec the models may ask for (causal, sliding windows on both
sides, grouped-query heads, a scale of the model's own) on mixed-length flat batches: against a float64
per-sequence reference written here from the definition, and against naive; the forward context is per
thread."""

from __future__ import annotations

import threading

import pytest
import torch

from wde.layers.attention.backend import AttentionBackend
from wde.layers.attention.backends.naive import NaiveBackend
from wde.layers.attention.backends.torch_sdpa import TorchSdpaBackend
from wde.layers.attention.layer import Attention, attention_specs, bind_attention_backend
from wde.layers.attention.spec import AttentionSpec
from wde.layers.forward_context import get_forward_context, set_forward_context

ATOL = 1e-5  # float32 kernels against a float64 reference
SEQ_LENS = [5, 1, 9, 9, 17, 3, 12]  # equal lengths, a single token, a long one: masks and groups differ
HEAD_SIZE = 16
SPECS = {
    "plain": AttentionSpec(num_heads=4, head_size=HEAD_SIZE),
    "causal": AttentionSpec(num_heads=4, head_size=HEAD_SIZE, causal=True),
    "window": AttentionSpec(num_heads=4, head_size=HEAD_SIZE, sliding_window=(2, 3)),
    "causal-window": AttentionSpec(num_heads=4, head_size=HEAD_SIZE, causal=True, sliding_window=(3, 0)),
    "gqa": AttentionSpec(num_heads=4, num_kv_heads=2, head_size=HEAD_SIZE),
    "gqa-causal-scaled": AttentionSpec(
        num_heads=6, num_kv_heads=2, head_size=HEAD_SIZE, causal=True, scale=0.1
    ),
}
BACKENDS: list[type[AttentionBackend]] = [NaiveBackend, TorchSdpaBackend]


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: AttentionSpec) -> torch.Tensor:
    """Softmax(q k^T * scale + mask) v per sequence, in float64, with the mask written out element-wise."""
    out = torch.empty_like(q, dtype=torch.float64)
    start = 0
    for seq_len in SEQ_LENS:
        for head in range(spec.num_heads):
            kv_head = head // spec.num_queries_per_kv
            for i in range(seq_len):
                scores = []
                for j in range(seq_len):
                    allowed = not (spec.causal and j > i)
                    if spec.sliding_window is not None:
                        left, right = spec.sliding_window
                        allowed = allowed and i - j <= left and j - i <= right
                    score = (q[start + i, head].double() @ k[start + j, kv_head].double()) * spec.scale
                    scores.append(score if allowed else torch.tensor(float("-inf"), dtype=torch.float64))
                weights = torch.softmax(torch.stack(scores), dim=0)
                out[start + i, head] = weights @ v[start : start + seq_len, kv_head].double()
        start += seq_len
    return out


@pytest.mark.parametrize("backend_cls", BACKENDS, ids=lambda cls: cls.name)
@pytest.mark.parametrize("spec_name", list(SPECS))
def test_backend_honours_the_spec(backend_cls: type[AttentionBackend], spec_name: str) -> None:
    spec = SPECS[spec_name]
    generator = torch.Generator().manual_seed(0)
    num_tokens = sum(SEQ_LENS)
    q = torch.randn(num_tokens, spec.num_heads, HEAD_SIZE, generator=generator)
    k = torch.randn(num_tokens, spec.num_kv_heads, HEAD_SIZE, generator=generator)
    v = torch.randn(num_tokens, spec.num_kv_heads, HEAD_SIZE, generator=generator)
    metadata = backend_cls.build_metadata(SEQ_LENS, torch.device("cpu"))
    got = backend_cls(spec).forward(q, k, v, metadata)
    assert got.shape == q.shape
    torch.testing.assert_close(got.double(), reference(q, k, v, spec), atol=ATOL, rtol=0)


def test_layers_with_different_specs_share_one_batch_metadata() -> None:
    """ModernBERT-like: global and windowed layers over the same SDPA groups give each its own mask."""
    generator = torch.Generator().manual_seed(1)
    num_tokens = sum(SEQ_LENS)
    q, k, v = (torch.randn(num_tokens, 4, HEAD_SIZE, generator=generator) for _ in range(3))
    metadata = TorchSdpaBackend.build_metadata(SEQ_LENS, torch.device("cpu"))
    for name in ("plain", "window", "plain", "causal"):
        got = TorchSdpaBackend(SPECS[name]).forward(q, k, v, metadata)
        torch.testing.assert_close(got.double(), reference(q, k, v, SPECS[name]), atol=ATOL, rtol=0)


def test_specs_are_collected_and_each_layer_gets_its_own_backend() -> None:
    model = torch.nn.ModuleList([Attention(SPECS["plain"]), Attention(SPECS["gqa"])])
    assert attention_specs(model) == [SPECS["plain"], SPECS["gqa"]]
    bind_attention_backend(model, NaiveBackend)
    assert [layer.backend.spec for layer in model] == [SPECS["plain"], SPECS["gqa"]]
    assert model[0].backend is not model[1].backend


def test_spec_checks_its_values() -> None:
    assert AttentionSpec(num_heads=8, head_size=64).scale == 64**-0.5
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        AttentionSpec(num_heads=6, num_kv_heads=4, head_size=8)


def test_forward_context_is_per_thread() -> None:
    """Two engines in one process run on two threads: neither sees the other's batch."""
    seen: dict[str, object] = {}
    barrier = threading.Barrier(2)

    def run(name: str) -> None:
        metadata = NaiveBackend.build_metadata([len(name)], torch.device("cpu"))
        with set_forward_context(metadata):
            barrier.wait(timeout=10)  # both contexts are set now
            seen[name] = get_forward_context().attn_metadata.seq_lens

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "bbb")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == {"a": [1], "bbb": [3]}
    with pytest.raises(RuntimeError, match="no forward context"):
        get_forward_context()
