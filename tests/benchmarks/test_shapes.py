"""benchmarks.shapes: a --smoke run on tiny shapes (and the bundled MiniLM, for the MRR@10 column) prints a
table per shape with sentence-transformers, wde float32 and int8 rows and sane values; shapes, rows and peers
that cannot run are one line each, naming what to do. No timing is asserted."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from benchmarks import peers, shape_models, shapes
from tests.tiny_models import training_texts

# system | tokens/s (median) | min / max | vs ST | GFLOP/s (share) | min cosine or score diff [| MRR@10]
ROW = re.compile(
    r"^\| (?P<system>[^|]+) \| (?P<speed>[\d,]+) \| [\d,]+ / [\d,]+ \| (?P<ratio>[\d.]+)x \| "
    r"[\d,.]+ \((?P<share>\d+)%\) \| (?P<agreement>[-\d.e+]+) (?:\| (?P<mrr>[\d.]+) )?\|$"
)


def write_inputs(folder: Path) -> tuple[Path, Path]:
    """A docs.jsonl and a rerank.jsonl (3 queries, 4 candidates each) of the tiny models' training texts."""
    texts = training_texts()
    docs = folder / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts[:20]))
    rerank = folder / "rerank.jsonl"
    records = [
        {"query": texts[20 + i], "documents": texts[30 + 4 * i : 34 + 4 * i], "relevant": i % 4}
        for i in range(3)
    ]
    rerank.write_text("".join(json.dumps(record) + "\n" for record in records))
    return docs, rerank


def tables(out: str) -> dict[str, list[re.Match[str]]]:
    """Each shape's table rows, by shape name."""
    found: dict[str, list[re.Match[str]]] = {}
    name = None
    for line in out.splitlines():
        if line.startswith("### "):
            name = line[4:].split(":")[0]
            found[name] = []
        elif name is not None and (match := ROW.match(line)):
            found[name].append(match)
    return found


@pytest.mark.slow
def test_smoke_prints_a_table_per_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs, rerank = write_inputs(tmp_path)
    names = ["minilm", "bert-tiny", "bert-tiny-ce", "qwen3-tiny"]
    argv = ["--smoke", "--shapes", *names, "--limit", "6", "--data", str(docs), "--rerank-data", str(rerank)]
    shapes.main([*argv, "--cache-dir", str(tmp_path / "shapes")])
    out = capsys.readouterr().out
    assert out.startswith("## CPU shapes matrix: ")
    assert "- ISA: " in out and "sentence-transformers " in out
    found = tables(out)
    assert list(found) == names
    wde_rows, _ = shapes.wde_rows()
    for name, rows in found.items():
        systems = [row["system"] for row in rows]
        assert len(rows) == 1 + len(wde_rows), out  # --smoke: no peers
        assert systems[0].startswith("sentence-transformers") and rows[0]["ratio"] == "1.00"
        assert systems[1] == ("wde LLM.score float32" if name == "bert-tiny-ce" else "wde LLM.encode float32")
        for row in rows:
            assert int(row["speed"].replace(",", "")) > 0
        agreement = float(rows[1]["agreement"])  # wde float32 against sentence-transformers float32
        if name == "bert-tiny-ce":
            assert agreement <= 1e-4
        else:
            assert agreement >= 0.9999
        assert (rows[0]["mrr"] is not None) == (name == "minilm")  # MRR@10: real weights only
    assert 0.0 <= float(found["minilm"][1]["mrr"]) <= 1.0
    assert "max abs score diff vs ST float32" in out and "min cosine vs ST float32" in out


def test_missing_weights_and_inputs_are_one_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing loads: mpnet is not fetched, the rerank file is missing (the cross-encoder's pairs)."""
    docs, _ = write_inputs(tmp_path)
    unfetched = dataclasses.replace(shape_models.SHAPES["mpnet"], locate=lambda: None)
    monkeypatch.setitem(shape_models.SHAPES, "mpnet", unfetched)
    missing = tmp_path / "no-rerank.jsonl"
    argv = [
        "--smoke",
        "--shapes",
        "mpnet",
        "bert-tiny-ce",
        "--data",
        str(docs),
        "--rerank-data",
        str(missing),
    ]
    shapes.main([*argv, "--cache-dir", str(tmp_path / "shapes")])
    out = capsys.readouterr().out
    assert "### mpnet: skipped, all-mpnet-base-v2 is not fetched: run `make bench-shapes-weights`" in out
    assert f"- skipped: cross-encoder shapes skipped: benchmark data {missing} not found" in out
    assert "### bert-tiny-ce: skipped, its input file is missing" in out
    assert not (tmp_path / "shapes").exists()


def test_peers_that_cannot_run_here_say_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from wde.platforms import cpu

    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset({"avx2"}))
    monkeypatch.setattr(peers, "REPO_ROOT", tmp_path)  # no venvs
    usable, skipped = shapes.usable_peers(list(shapes.MATRIX_PEERS), {"avx2"})
    assert usable == []
    assert sum("run `make peer-st-onnx`" in line for line in skipped) == 2
    assert sum("run `make peer-st-openvino`" in line for line in skipped) == 3
    monkeypatch.setattr(peers, "missing", lambda names: [])  # venvs there
    usable, skipped = shapes.usable_peers(list(shapes.MATRIX_PEERS), set())
    assert "st-onnx" in usable and "st-onnx-int8" not in usable and "st-openvino" not in usable
    assert any("no ONNX int8 config fits this CPU" in line for line in skipped)
    assert any("the st-openvino-f32 row stands for it" in line for line in skipped)


def test_smoke_defaults() -> None:
    args = shapes.build_parser().parse_args(["--smoke"])
    shapes.apply_defaults(args)
    assert args.shapes == list(shape_models.SMOKE_SHAPES) and args.peer == []
    assert (args.limit, args.repeats) == (8, 1)
    args = shapes.build_parser().parse_args(["--peer", "st-onnx"])
    shapes.apply_defaults(args)
    assert args.shapes == list(shape_models.DEFAULT_SHAPES) and args.peer == ["st-onnx"]


def test_each_shape_gets_the_peers_whose_backend_loads_it() -> None:
    every = ["st-onnx", "st-onnx-int8", "st-openvino-f32", "st-openvino", "st-openvino-int8"]
    assert shapes.shape_peers(shape_models.SHAPES["mpnet"], every) == every
    assert shapes.shape_peers(shape_models.SHAPES["bert-base-ce"], every) == every  # as a CrossEncoder
    openvino = ["st-openvino-f32", "st-openvino", "st-openvino-int8"]
    assert shapes.shape_peers(shape_models.SHAPES["qwen3-0.6b-4l"], every) == openvino
    shape = shape_models.SHAPES["gemma3-300m-4l"]
    assert shapes.shape_peers(shape, every) == [] and shape.why_no_peer
