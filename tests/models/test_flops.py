"""The benchmark's useful-FLOP count equals what torch's FlopCounterMode counts in a real forward."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.flops import encoder_flops, matmul_peak_gflops
from wde import LLM


def test_encoder_flops_equal_counted_flops(bert_dir: Path) -> None:
    # naive attention runs exactly one QK^T and one PV matmul per sequence (no padding), so every counted
    # FLOP is useful; mean pooling and normalisation add no matmuls.
    llm = LLM(str(bert_dir), attention_backend="naive")
    texts = ["a b c", "the quick brown fox jumps over the lazy dog", "x"]
    seq_lens = [output.num_tokens for output in llm.encode(texts)]
    with FlopCounterMode(display=False) as counter:
        llm.encode(texts)
    hf_config = json.loads((bert_dir / "config.json").read_text())
    assert counter.get_total_flops() == encoder_flops(hf_config, seq_lens)


def test_matmul_peak_is_positive_and_finite() -> None:
    hf_config = {"hidden_size": 32, "intermediate_size": 64}
    peak = matmul_peak_gflops(hf_config, torch.float32, num_tokens=64, min_seconds=0.01)
    assert 0 < peak < float("inf")
