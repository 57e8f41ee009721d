"""A quantization's accuracy on real weights: the bundled all-MiniLM-L6-v2 unquantized and quantized, in one
dtype, on one device: the lowest and mean cosine of the quantized embeddings to the unquantized over
``docs.jsonl`` texts, and MRR@10 of both on ``rerank.jsonl`` (cosine ranking of each query's candidates,
``LLM.rerank``). The GPU bench's decoder part prints it for ``--quantization fp8`` beside fp8's speed (issue
51: random decoder weights say how fast, only real weights say what retrieval keeps); on a CPU the same
code runs with int8.

    python -m benchmarks.quantized_quality --quantization int8 --device cpu --dtype float32
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.quality import row_cosines
from benchmarks.rerank_quality import load_records, mrr_at_10


@dataclass(frozen=True)
class Quality:
    num_texts: int
    num_queries: int
    min_cosine: float
    mean_cosine: float
    mrr: float  # unquantized
    quantized_mrr: float


def measure(
    model: str, texts: list[str], records: list[dict], device: str, dtype: str, quantization: str
) -> Quality:
    """Both engines, one after the other (one in memory at a time)."""
    from wde import LLM

    relevant = [record["relevant"] for record in records]
    results = []
    for extra in ({}, {"quantization": quantization}):
        llm = LLM(model, device=device, dtype=dtype, **extra)
        try:
            embeddings = np.stack([output.embedding for output in llm.encode(texts)])
            rankings = [[r.index for r in llm.rerank(rec["query"], rec["documents"])] for rec in records]
        finally:
            llm.engine.shutdown()
        results.append((embeddings, mrr_at_10(rankings, relevant)))
    (plain, mrr), (quantized, quantized_mrr) = results
    cosines = row_cosines(quantized, plain)
    return Quality(len(texts), len(records), float(cosines.min()), float(cosines.mean()), mrr, quantized_mrr)


def quality_line(quality: Quality, quantization: str, dtype: str) -> str:
    return (
        f"- {quantization} on real weights (all-MiniLM-L6-v2, {dtype}): cosine to unquantized min "
        f"{quality.min_cosine:.5f}, mean {quality.mean_cosine:.5f} over {quality.num_texts:,} docs texts; "
        f"MRR@10 on {quality.num_queries} rerank.jsonl queries {quality.quantized_mrr:.4f} against "
        f"{quality.mrr:.4f} unquantized ({quality.quantized_mrr / quality.mrr:.1%})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quantization", default="int8")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--model", default=None, help="default: the bundled all-MiniLM-L6-v2")
    parser.add_argument("--docs", default=shared_data_path("docs.jsonl"))
    parser.add_argument("--rerank", default=shared_data_path("rerank.jsonl"))
    parser.add_argument("--limit", type=int, default=1000, help="docs texts")
    parser.add_argument("--queries", type=int, default=None, help="rerank.jsonl queries (default all)")
    args = parser.parse_args(argv)
    from wde.engine_args import default_model_path

    texts, records = load_texts(args.docs, args.limit), load_records(args.rerank, args.queries)
    model = args.model or default_model_path()
    quality = measure(model, texts, records, args.device, args.dtype, args.quantization)
    print(quality_line(quality, args.quantization, args.dtype))


if __name__ == "__main__":
    main()
