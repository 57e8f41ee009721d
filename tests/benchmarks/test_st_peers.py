"""The st-* peers without their venvs: the worker protocol (parsing, answers, a real worker process run by
this venv's python, which answers errors instead of dying), export bookkeeping, calibration texts, cache
keys, load commands, and the bench's refusals."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from benchmarks import offline, peers, st_peers
from benchmarks.peer_scripts import st_backend
from benchmarks.peer_scripts.st_backend import ProtocolError, WorkerError, parse_answer, parse_command
from benchmarks.quality import Quality

LOAD = {
    "cmd": "load",
    "model": "/m",
    "backend": "onnx",
    "int8": False,
    "threads": 2,
    "batch_size": 32,
    "cache_dir": "/c",
}


def line(message: dict) -> str:
    return st_backend.message_line(message)


def test_parse_command_accepts_each_command() -> None:
    assert parse_command(line(LOAD))["backend"] == "onnx"
    assert parse_command(line({**LOAD, "int8": True, "onnx_config": "avx2"}))["int8"] is True
    assert parse_command(line({"cmd": "time", "texts": "t.json", "out": None}))["cmd"] == "time"
    assert parse_command(line({"cmd": "embed", "texts": "t.json", "out": "e.npy"}))["out"] == "e.npy"
    assert parse_command(line({"cmd": "quit"})) == {"cmd": "quit"}
    assert parse_command(line({**LOAD, "task": "score"}))["task"] == "score"  # a CrossEncoder


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ("not json", "not JSON"),
        (json.dumps(["load"]), "cmd one of"),
        (json.dumps({"cmd": "train"}), "cmd one of"),
        (json.dumps({**LOAD, "threads": "2"}), "'threads' must be int"),
        (json.dumps({**LOAD, "threads": True}), "'threads' must be int"),
        (json.dumps({**LOAD, "backend": "tensorrt"}), "backend must be one of"),
        (json.dumps({**LOAD, "threads": 0}), "at least 1"),
        (json.dumps({**LOAD, "task": "classify"}), "task must be one of"),
        (json.dumps({**LOAD, "int8": True}), "needs onnx_config"),
        (json.dumps({**LOAD, "backend": "openvino", "int8": True}), "needs calibration"),
        (json.dumps({"cmd": "embed", "texts": "t.json"}), "'out' must be str"),
    ],
)
def test_parse_command_refuses_malformed_commands(message: str, error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        parse_command(message)


def test_parse_answer() -> None:
    assert parse_answer('{"ok": true, "seconds": 1.5}\n')["seconds"] == 1.5
    with pytest.raises(WorkerError, match="boom"):
        parse_answer('{"ok": false, "error": "boom"}\n')
    with pytest.raises(ProtocolError, match="exited"):
        parse_answer("")
    with pytest.raises(ProtocolError, match="not JSON"):
        parse_answer("Exporting the model...\n")
    with pytest.raises(ProtocolError, match="no ok field"):
        parse_answer('{"seconds": 1}\n')


def test_serve_answers_every_line_and_stops_at_quit() -> None:
    commands = io.StringIO(
        "garbage\n\n"
        + line({"cmd": "time", "texts": "t.json", "out": None})
        + line({"cmd": "quit"})
        + line({"cmd": "time", "texts": "never read", "out": None})
    )
    answers = io.StringIO()
    st_backend.serve(commands, answers)
    lines = answers.getvalue().splitlines()
    assert len(lines) == 3
    assert "ProtocolError: not JSON" in json.loads(lines[0])["error"]
    assert "send load first" in json.loads(lines[1])["error"]
    assert json.loads(lines[2]) == {"ok": True}


def test_export_bookkeeping(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    folder = st_backend.export_folder(tmp_path / "cache", "onnx", "5.7.0")
    assert folder.name == "onnx-st5.7.0"
    folder.parent.mkdir()
    st_backend.copy_model(model, folder)
    assert (folder / "config.json").is_file() and not folder.with_name(folder.name + ".partial").exists()
    assert st_backend.finished_exports(folder) == set()
    st_backend.mark_exported(folder, "onnx/model.onnx")
    st_backend.mark_exported(folder, "onnx/model_qint8_avx2.onnx")
    assert st_backend.finished_exports(folder) == {"onnx/model.onnx", "onnx/model_qint8_avx2.onnx"}
    assert st_backend.int8_file("onnx", "avx512_vnni", None) == (
        "qint8_avx512_vnni", "onnx/model_qint8_avx512_vnni.onnx"
    )  # fmt: skip
    static = st_backend.int8_file("openvino", None, {"key": "abc"})
    assert static == ("qint8_static_abc", "openvino/openvino_model_qint8_static_abc.xml")


def test_a_worker_process_answers_errors_and_quits(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The real script, run by this venv's python: the parent gets each error with the worker's log."""
    monkeypatch.setattr(peers, "executable", lambda name: Path(sys.executable))
    worker = st_peers.StWorker("st-onnx", 1, tmp_path)
    try:
        with pytest.raises(RuntimeError, match=r"peer 'st-onnx' failed on time: .*send load first"):
            worker.request({"cmd": "time", "texts": "t.json", "out": None})
        with pytest.raises(RuntimeError, match="failed on load"):
            worker.request({**LOAD, "model": str(tmp_path / "missing"), "cache_dir": str(tmp_path / "c")})
        assert worker.process.poll() is None  # still serving
    finally:
        worker.close()
    assert worker.process.returncode == 0


def test_calibration_texts_must_not_be_timed(tmp_path: Path) -> None:
    lines = [f"doc {i}" for i in range(10)]
    assert st_peers.calibration_texts(lines, lines[:7], count=3) == ["doc 7", "doc 8", "doc 9"]
    with pytest.raises(ValueError, match="pass --limit 7 or less"):
        st_peers.calibration_texts(lines, lines[:8], count=3)
    first = st_peers.write_calibration(["a", "b"], root=tmp_path)
    assert first == st_peers.write_calibration(["a", "b"], root=tmp_path)
    assert first["num_samples"] == 2
    assert first["key"] != st_peers.write_calibration(["a"], root=tmp_path)["key"]
    rows = (Path(first["dir"]) / "calibration.jsonl").read_text().splitlines()
    assert [json.loads(row)["text"] for row in rows] == ["a", "b"]


def test_model_cache_dir_changes_with_the_model(tmp_path: Path) -> None:
    model = tmp_path / "models" / "mini"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"12")
    key = st_peers.model_cache_dir(model, root=tmp_path)
    assert key.name.startswith("models-mini-") and key == st_peers.model_cache_dir(model, root=tmp_path)
    (model / "model.safetensors").write_bytes(b"123")
    assert st_peers.model_cache_dir(model, root=tmp_path) != key


def test_load_commands_parse(tmp_path: Path) -> None:
    calibration = {"dir": str(tmp_path), "key": "k", "num_samples": 3}
    vnni = {"avx2", "avx512f", "avx512bw", "avx512_vnni"}
    for name, peer in st_peers.ST_PEERS.items():
        command = st_peers.load_command(name, str(tmp_path), 2, 32, calibration, flags=vnni)
        assert parse_command(line(command))["backend"] == peer.backend
    assert st_peers.load_command("st-onnx-int8", str(tmp_path), 2, 32, None, flags=vnni)["onnx_config"] == (
        "avx512_vnni"
    )
    # OpenVINO runs its non-int8 parts in bf16 by default where the CPU has bf16: the -f32 peers force float32
    f32 = st_peers.load_command("st-openvino-f32", str(tmp_path), 2, 32, None, flags=vnni)
    assert f32["precision_hint"] == "f32" and "precision_hint" not in st_peers.load_command(
        "st-openvino", str(tmp_path), 2, 32, None, flags=vnni
    )
    assert st_peers.load_command("st-openvino-int8-f32", str(tmp_path), 2, 32, calibration)["int8"] is True
    with pytest.raises(ProtocolError, match="precision_hint must be"):
        parse_command(line({**LOAD, "precision_hint": "int4"}))
    assert st_peers.load_command("st-onnx", str(tmp_path), 2, 32, None, flags=vnni)["task"] == "embed"
    scoring = st_peers.load_command("st-openvino", str(tmp_path), 2, 32, None, flags=vnni, task="score")
    assert parse_command(line(scoring))["task"] == "score"


def test_a_cross_encoder_worker_reads_pairs_and_says_so_in_its_label(tmp_path: Path) -> None:
    """The pairs file's JSON lists come back as (query, document) tuples, as ``CrossEncoder.predict`` takes
    them; the row label names the CrossEncoder."""
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps([["what is zstd", "a compressor"], ["vim", "an editor"]]))
    worker = st_backend.Worker()
    worker.task = "score"
    assert worker._texts(str(pairs)) == [("what is zstd", "a compressor"), ("vim", "an editor")]
    versions = {"sentence-transformers": "6.2.0", "openvino": "2026.4"}
    label = st_backend._label({**LOAD, "backend": "openvino", "task": "score"}, versions)
    assert label == "ST 6.2.0 CrossEncoder OpenVINO 2026.4 float32 (default precision hint) (batch 32)"


@pytest.mark.parametrize(
    ("flags", "dtype"),
    [(frozenset({"avx2", "fma"}), "float32"), (frozenset({"avx2", "avx512_bf16"}), "bfloat16")],
)
def test_bench_resolves_fast_by_the_cpu_and_keeps_st_peers_beside_it(
    monkeypatch: pytest.MonkeyPatch, flags: frozenset[str], dtype: str
) -> None:
    """``--dtype fast`` is what ``LLM(dtype="fast")`` picks here; the st-* peers keep their own precision
    beside it (st-openvino: OpenVINO's default, the row issue 26 compares wde's fast mode with)."""
    from wde.platforms import cpu

    monkeypatch.setattr(peers, "missing", lambda names: [])
    monkeypatch.setattr(cpu, "cpu_flags", lambda: flags)
    parser = offline.build_parser()
    args = parser.parse_args(["--dtype", "fast", "--peer", "st-openvino"])
    offline.check_args(parser, args)
    assert args.dtype == dtype
    assert "--dtype fast: this CPU" in args.dtype_note


def test_bench_names_the_make_target_of_a_missing_venv(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(peers, "REPO_ROOT", tmp_path)
    with pytest.raises(SystemExit):
        offline.main(["--peer", "st-openvino-int8"])
    assert "run `make peer-st-openvino`" in capsys.readouterr().err


def test_table_header_and_rows_have_the_same_columns() -> None:
    baseline = offline.Timing("st", [2.0], 100, 10, 10**9, 10.0, Quality(1.0, 1.0, 0.5, 0.25))
    for with_rerank in (False, True):
        header = offline.table_header(with_rerank).splitlines()
        row = baseline.row(baseline, with_rerank)
        assert header[0].count("|") == header[1].count("|") == row.count("|")
        assert row.endswith("| 1.00x |")


class RefusingWorker:
    """A peer worker whose export fails, as optimum-intel's does for a family it cannot export."""

    made: ClassVar[list[RefusingWorker]] = []

    def __init__(self, name: str, threads: int, workdir: Path) -> None:
        self.name = name
        self.closed = False
        RefusingWorker.made.append(self)

    def request(self, command: dict) -> dict:
        raise RuntimeError(
            f"peer {self.name!r} failed on load: ValueError: cannot export this model\n"
            "--- the end of its log (/tmp/x.log):\nExporting the model to OpenVINO."
        )

    def close(self) -> None:
        self.closed = True


def test_a_peer_that_cannot_load_the_model_is_one_line_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(st_peers, "StWorker", RefusingWorker)
    failures: list[str] = []
    systems = st_peers.start(["st-openvino-f32"], str(tmp_path), ["a text"], 1, 8, None, tmp_path, failures)
    assert systems == [] and all(worker.closed for worker in RefusingWorker.made)
    assert failures == [
        "peer 'st-openvino-f32' could not load this model: "
        "peer 'st-openvino-f32' failed on load: ValueError: cannot export this model"
    ]
    with pytest.raises(RuntimeError, match="cannot export this model"):  # without the list: it raises
        st_peers.start(["st-openvino-f32"], str(tmp_path), ["a text"], 1, 8, None, tmp_path)
