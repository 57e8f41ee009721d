"""benchmarks.host_overhead on the tiny 1-layer model: every row printed as it is measured, the host work is
the from-ids time less the forward's, and the ratio line closes the run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import host_overhead
from tests.tiny_models import training_texts


def test_rows_are_printed_as_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": text}) + "\n" for text in training_texts()[:30]))
    argv = ["--data", str(data), "--num-texts", "60", "--repeats", "1", "--no-peer"]
    host_overhead.main([*argv, "--tokenizer-processes", "1"])
    out = capsys.readouterr().out
    rows = {
        match[1].strip(): float(match[2].replace(",", ""))
        # a difference of two timings (host work beside the forward) may print below zero on a busy machine
        for match in re.finditer(r"^\| ([^|]+) \| (-?[\d,.]+) \| -?[\d,]+ \|$", out, re.MULTILINE)
    }
    assert set(rows) == {
        host_overhead.TOKENIZER_ROW,
        host_overhead.FROM_IDS_ROW,
        "of which execute_model (forward + pooling + output copy)",
        "host work beside the forward",
        host_overhead.FROM_TEXT_ROW,
        f"{host_overhead.FROM_TEXT_ROW}, tokenizer processes: 1",
    }
    from_ids, forward = (
        rows[host_overhead.FROM_IDS_ROW],
        rows["of which execute_model (forward + pooling + output copy)"],
    )
    assert rows["host work beside the forward"] == pytest.approx(from_ids - forward, abs=0.2)
    assert "GPU busy share" not in out  # CPU: no CUDA events
    assert re.search(r"^from text / tokenizer alone: \d+\.\d\dx$", out, re.MULTILINE)
