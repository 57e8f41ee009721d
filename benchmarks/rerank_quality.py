"""Rerank quality on a labelled set: ``LLM.rerank`` against the same model's ranking in sentence-transformers
(cosine for embedding models, CrossEncoder.rank for cross-encoders), with MRR@10 and recall@1.

    python -m benchmarks.rerank_quality --data ../shared/data/rerank.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.dataset import require_data, shared_data_path


def mrr_at_10(rankings: Sequence[Sequence[int]], relevant: Sequence[int]) -> float:
    reciprocal = [
        1.0 / (list(r[:10]).index(rel) + 1) if rel in r[:10] else 0.0
        for r, rel in zip(rankings, relevant, strict=True)
    ]
    return float(np.mean(reciprocal))


def recall_at_1(rankings: Sequence[Sequence[int]], relevant: Sequence[int]) -> float:
    return float(np.mean([r[0] == rel for r, rel in zip(rankings, relevant, strict=True)]))


def reference_rankings(model_path: str, records: list[dict]) -> list[list[int]]:
    """sentence-transformers' cosine ranking: every distinct text embedded once, then cos_sim per query."""
    from sentence_transformers import SentenceTransformer, util

    model = SentenceTransformer(model_path, device="cpu")
    rankings = []
    for record in records:
        query = model.encode(record["query"], convert_to_tensor=True)
        documents = model.encode(record["documents"], convert_to_tensor=True)
        scores = util.cos_sim(query, documents)[0].numpy()
        rankings.append(sorted(range(len(scores)), key=lambda i: -scores[i]))
    return rankings


def load_records(path: str | Path, limit: int | None = None) -> list[dict]:
    with require_data(path).open(encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return records[:limit] if limit else records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=shared_data_path("rerank.jsonl"))
    parser.add_argument(
        "--model", default=None, help="local HF directory (default: bundled all-MiniLM-L6-v2)"
    )
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)

    from wde import LLM
    from wde.engine_args import default_model_path

    model_path = args.model or default_model_path()
    records = load_records(args.data, args.limit)
    relevant = [record["relevant"] for record in records]
    llm = LLM(model_path)
    ours = [[r.index for r in llm.rerank(record["query"], record["documents"])] for record in records]
    reference = reference_rankings(model_path, records)
    num_identical = sum(a == b for a, b in zip(ours, reference, strict=True))
    print(f"# {len(records)} queries x {len(records[0]['documents'])} candidates, model {model_path}")
    print("| ranking | MRR@10 | recall@1 |")
    print("|---|---|---|")
    print(f"| wde LLM.rerank | {mrr_at_10(ours, relevant):.4f} | {recall_at_1(ours, relevant):.4f} |")
    st_mrr, st_recall = mrr_at_10(reference, relevant), recall_at_1(reference, relevant)
    print(f"| sentence-transformers | {st_mrr:.4f} | {st_recall:.4f} |")
    print(f"identical rankings: {num_identical}/{len(records)}")


if __name__ == "__main__":
    main()
