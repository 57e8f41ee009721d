"""``wde bench`` end to end on a few texts: one table with sentence-transformers float32 as the baseline,
wde's row with its ratio and GFLOP/s against the measured peak, and the cosine against the reference; the
quality columns (cosine, MRR@10, recall@1 on a tiny rerank set) on every row."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import offline

TEXTS = [
    "apt is the command-line package manager of Debian",
    "a library for parsing JSON quickly",
    "x",
    "utilities for the manipulation of PNG images, with a long description " * 4,
]


def test_offline_bench_prints_one_comparable_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    rerank = tmp_path / "rerank.jsonl"
    record = {"query": "Debian package manager", "documents": TEXTS, "relevant": 0}
    rerank.write_text(json.dumps(record) + "\n", encoding="utf-8")
    offline.main(["--data", str(data), "--repeats", "1", "--rerank-data", str(rerank)])
    out = capsys.readouterr().out
    assert f"# {len(TEXTS)} texts" in out
    assert re.search(r"linear peak .*float32 [\d,.]+ GFLOP/s", out)
    baseline = next(line for line in out.splitlines() if line.startswith("| sentence-transformers float32"))
    ours = next(line for line in out.splitlines() if line.startswith("| wde LLM.encode float32"))
    assert baseline.endswith("| 1.00x |")
    assert re.search(r"\| [\d.]+x \|$", ours) and "% of peak)" in ours
    assert "| min cosine | mean cosine | MRR@10 | recall@1 |" in out
    assert re.search(r"\| 1\.000000 \| 1\.000000 \| [\d.]+ \| [\d.]+ \| [\d.]+x \|$", ours)
    min_cosine = float(re.search(r"min cosine ([\d.]+)", out).group(1))
    assert min_cosine >= 0.99999
