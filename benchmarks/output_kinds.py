"""Throughput and response size of each output kind on one BGE-M3-shaped model, one interleaved run:
dense only, sparse only, ColBERT (multi-vector) only, and all three from one forward pass, on the same texts.

The model: the bundled all-MiniLM-L6-v2 (a real 6-layer encoder and tokenizer) with BGE-M3's head files
beside it (``sparse_linear.pt``, ``colbert_linear.pt``: seeded random weights, the real layout and shapes),
so the encoder cost is a real one and the heads cost what BGE-M3's do per token. Response sizes are the JSON
bodies the server sends for the texts (TEI routes, and /v1/embeddings with base64).

    python -m benchmarks.output_kinds --data ../shared/data/docs.jsonl --limit 1000
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.cpu_info import cpu_flags, cpu_model, isa_flags
from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.interleave import time_interleaved
from server.responses import dumps
from server.routes.embed_sparse import sparse_values
from server.routes.openai import embedding_value
from wde import LLM
from wde.engine_args import default_model_path

KINDS: dict[str, str | tuple[str, ...]] = {
    "dense": "dense",
    "sparse": "sparse",
    "multi_vector": "multi_vector",
    "all three": ("dense", "sparse", "multi_vector"),
}
SEED = 0


def bge_m3_shaped(folder: Path) -> Path:
    """The bundled model's files plus seeded BGE-M3 heads ([1, hidden] sparse, [hidden, hidden] ColBERT)."""
    shutil.copytree(default_model_path(), folder, dirs_exist_ok=True)
    hidden = int(json.loads((folder / "config.json").read_text())["hidden_size"])
    generator = torch.Generator().manual_seed(SEED)
    torch.save(
        {"weight": torch.randn(1, hidden, generator=generator) * 0.05, "bias": torch.tensor([0.1])},
        folder / "sparse_linear.pt",
    )
    torch.save(
        {
            "weight": torch.randn(hidden, hidden, generator=generator) * 0.05,
            "bias": torch.zeros(hidden),
        },
        folder / "colbert_linear.pt",
    )
    return folder


class KindSystem:
    """One output kind (or all three) of the shared LLM, as a system of the interleaved timer."""

    dtype = "float32"

    def __init__(self, llm: LLM, label: str, output: str | tuple[str, ...], texts: list[str]) -> None:
        self.llm, self.label, self.output, self.texts = llm, label, output, texts
        self.outputs: list[Any] = []

    def time_pass(self, keep: bool) -> float:
        start = time.perf_counter()
        outputs = self.llm.encode(
            self.texts, output=self.output if isinstance(self.output, str) else list(self.output)
        )
        elapsed = time.perf_counter() - start
        if keep:
            self.outputs = outputs
        return elapsed

    def last_embeddings(self) -> np.ndarray:
        raise NotImplementedError("output kinds are compared by speed and size only")

    def embed(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError("output kinds are compared by speed and size only")


def tei_body(label: str, outputs: Sequence[Any]) -> bytes:
    """The TEI route's body for these outputs: /embed, /embed_sparse, /embed_all (all three: none)."""
    if label == "dense":
        return dumps([output.embedding for output in outputs])
    if label == "sparse":
        return dumps([sparse_values(output) for output in outputs])
    if label == "multi_vector":
        return dumps([output.vectors for output in outputs])
    return b""


def openai_body(outputs: Sequence[Any]) -> bytes:
    data = [
        {"object": "embedding", "index": index, "embedding": embedding_value(output, base64_format=True)}
        for index, output in enumerate(outputs)
    ]
    return dumps({"object": "list", "data": data})


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=shared_data_path("docs.jsonl"))
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    texts = load_texts(args.data, args.limit)
    flags = cpu_flags()
    print(f"CPU: {cpu_model()} ({' '.join(isa_flags(flags))}), {args.threads} threads; {len(texts)} texts")

    with tempfile.TemporaryDirectory() as tmp:
        llm = LLM(str(bge_m3_shaped(Path(tmp) / "model")), device="cpu")
        systems = [KindSystem(llm, label, output, texts) for label, output in KINDS.items()]
        seconds = time_interleaved(systems, args.repeats)
        num_tokens = sum(output.num_tokens for output in systems[0].outputs)
        dense_seconds = float(np.median(seconds[0]))
        print(f"\n{num_tokens} tokens; median of {args.repeats} interleaved passes")
        print("| output | tokens/s | vs dense | TEI route body / text | /v1/embeddings base64 / text |")
        print("|---|---|---|---|---|")
        for system, timings in zip(systems, seconds, strict=True):
            median = float(np.median(timings))
            tei = len(tei_body(system.label, system.outputs)) / len(texts)
            openai = len(openai_body(system.outputs)) / len(texts)
            tei_text = f"{tei / 1024:.1f} KiB" if tei else "-"
            print(
                f"| {system.label} | {num_tokens / median:,.0f} | {dense_seconds / median:.2f}x | {tei_text} "
                f"| {openai / 1024:.1f} KiB |"
            )


if __name__ == "__main__":
    main()
