"""``make gpu-check`` and the GPU bench on a CPU machine: the check refuses in one line with exit 2, its
pieces (which carried wheels to install, the JUnit summary) work, and the bench's code path runs end to end
with ``--device cpu --smoke`` (tiny sizes) against sentence-transformers on the same weights."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_check, gpu_modes
from benchmarks.gpu_tables import Row
from tests.tiny_models import training_texts

REPO_ROOT = Path(__file__).resolve().parents[2]
NO_CUDA = "gpu-check: no CUDA device is present"
needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")


@needs_no_cuda
def test_make_gpu_check_says_no_cuda_in_one_line_and_exits_2() -> None:
    command = (
        # --no-print-directory: under `make test` this make is nested and would print "Entering directory"
        ["make", "--no-print-directory", "gpu-check"]
        if shutil.which("make")
        else [sys.executable, "-m", "benchmarks.gpu_check"]
    )
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == gpu_check.NO_CUDA_EXIT_CODE == 2
    assert result.stdout.startswith(NO_CUDA) and result.stdout.count("\n") == 1


def test_only_missing_or_out_of_range_wheels_are_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = {"pydantic-core": None, "typing-extensions": "4.9.0", "orjson": "3.0.0", "anyio": "4.16.0"}
    monkeypatch.setattr(gpu_check, "installed_version", lambda name: installed[name])
    requirements = {"typing-extensions": ">=4.16.0,>=4.10.0", "anyio": ">=4.1.0,<5,>=4.0.0", "orjson": ""}
    core = Path("pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.whl")
    assert gpu_check.distribution_name(core) == "pydantic-core"
    assert gpu_check.needs_install(core, requirements)  # missing
    assert gpu_check.needs_install(Path("typing_extensions-4.16.0-py3-none-any.whl"), requirements)  # too old
    assert not gpu_check.needs_install(Path("anyio-4.16.0-py3-none-any.whl"), requirements)  # in range
    assert not gpu_check.needs_install(
        Path("orjson-3.13.0-cp312-cp312-manylinux_2_17_x86_64.whl"), requirements
    )


def test_junit_summary_counts_and_names_failures(tmp_path: Path) -> None:
    (tmp_path / "t.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.gpu.a" name="ok"/>'
        '<testcase classname="tests.gpu.a" name="bad"><failure message="assert 0.9 &gt;= 0.999&#10;more"/>'
        '</testcase><testcase classname="tests.gpu.a" name="skip"><skipped message="no flash"/></testcase>'
        "</testsuite></testsuites>"
    )
    assert gpu_check.test_summary(tmp_path / "t.xml") == [
        "1 passed, 1 failed, 0 errors, 1 skipped",
        "- tests.gpu.a::bad: assert 0.9 >= 0.999",
    ]
    assert "did not finish" in gpu_check.test_summary(tmp_path / "missing.xml")[0]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """docs.jsonl, queries.jsonl and rerank.jsonl (each query the start of one of its 20 candidates) of the
    test corpus: the smoke runs never need ``../shared``."""
    folder = tmp_path / "data"
    folder.mkdir()
    texts = training_texts()
    for name, records in (
        ("docs.jsonl", texts[8:72]),
        ("queries.jsonl", [t.split(".")[0] for t in texts[:64]]),
    ):
        (folder / name).write_text("".join(json.dumps({"text": text}) + "\n" for text in records))
    rerank = [
        {
            "query": texts[100 + i].split(".")[0],
            "documents": texts[100 + i - i % 20 : 120 + i - i % 20],
            "relevant": i % 20,
        }
        for i in range(5)
    ]
    (folder / "rerank.jsonl").write_text("".join(json.dumps(record) + "\n" for record in rerank))
    return folder


def data_args(data_dir: Path) -> list[str]:
    return ["--docs", str(data_dir / "docs.jsonl"), "--queries", str(data_dir / "queries.jsonl")]


def smoke_report(tmp_path: Path, data_dir: Path, flags: list[str]) -> str:
    """The report of a smoke run on the CPU, without the server part, with ``flags``."""
    report = tmp_path / "bench.md"
    gpu_modes.main(
        ["--device", "cpu", "--smoke", "--no-server", *flags, "--out", str(report), *data_args(data_dir)]
    )
    return report.read_text()


def row_cells(text: str, start: str) -> list[str]:
    row = next(line for line in text.splitlines() if line.startswith(start))
    return [cell.strip() for cell in row.strip("|").split("|")]


def test_bench_smoke_path_on_cpu(tmp_path: Path, data_dir: Path) -> None:
    """One tiny random BERT, one backend, no server: the rows carry tokens/s and the embeddings equal
    sentence-transformers' on the same weights."""
    flags = ["--models", "tiny", "--backends", "torch_sdpa", "--decoders", "--limit", "6"]
    text = smoke_report(tmp_path, data_dir, flags)
    assert "## BERT-tiny (random weights)" in text
    cells = row_cells(text, "| wde torch_sdpa | float32 | none |")
    assert float(cells[4].replace(",", "")) > 0  # tokens/s
    assert re.fullmatch(r"\d+\.\d+x", cells[5])  # against sentence-transformers float32
    assert float(cells[7]) >= 0.9999  # min cosine against sentence-transformers float32
    assert float(cells[9].replace(",", "")) > 0  # tokens/s from token ids
    assert cells[10] == "-"  # no GPU busy share on CPU
    for batch_size in (32, 256):
        assert any(
            line.startswith(f"| sentence-transformers (batch {batch_size}) | float32 |")
            for line in text.splitlines()
        )


@pytest.mark.slow
def test_bench_smoke_path_with_the_server_on_cpu(tmp_path: Path, data_dir: Path) -> None:
    """The whole smoke run: the bundled model too, and wde serve with 1 and 2 API workers (one text per
    request at concurrency 64 and 256, 32 per request at 64; two client processes) against in-process."""
    report = tmp_path / "bench.md"
    gpu_modes.main(
        [
            *("--device", "cpu", "--smoke", "--backends", "torch_sdpa", "--client-processes", "2"),
            *("--decoders", "--out", str(report), *data_args(data_dir)),
        ]
    )
    text = report.read_text()
    assert "## all-MiniLM-L6-v2 (bundled)" in text
    # 16 one-text requests a load, a quarter as many 32-text ones
    server_rows = [
        line
        for line in text.splitlines()
        if re.match(r"\| (1|2) \| (1 \| (64|256) \| 16|32 \| 64 \| 4) \|", line)
    ]
    assert [row.split("|")[1].strip() for row in server_rows] == ["1"] * 3 + ["2"] * 3  # API workers
    assert all(row.split("|")[9].strip() == "0" for row in server_rows)  # no errors
    # the CPU a request costs the engine process ("123 (45)": beside the forward in brackets), the workers
    assert all(re.fullmatch(r"\d+ \(-?\d+\)", row.split("|")[11].strip()) for row in server_rows)
    assert [row.split("|")[12].strip() == "-" for row in server_rows] == [True] * 3 + [False] * 3
    # the cores the two load-generator processes kept busy
    assert all(re.fullmatch(r"\d+\.\d of 2", row.split("|")[13].strip()) for row in server_rows)
    # a line per row naming the threads that kept a core busy (16 requests here: ticks, not figures)
    busy = [line for line in text.splitlines() if line.startswith("- --api-workers ")]
    assert len(busy) == 6 and all(re.search(r"concurrency \d+: (none|\S+/\S+ \d)", line) for line in busy)


@pytest.mark.slow
def test_gpu_check_code_path_on_cpu(tmp_path: Path, data_dir: Path) -> None:
    """``--device cpu``: install step, tests/gpu (all skip here), a smoke bench, the host path (16 texts: the
    code path, not the figures), one report."""
    bench = ["--models", "tiny", "--decoders", "--no-server", "--backends", "torch_sdpa"]
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--device", "cpu", "--out", str(out)]
        + ["--data", str(data_dir), "--host-arg=--num-texts=16"]
        + [f"--bench-arg={arg}" for arg in bench],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    report = (out / "gpu-report.md").read_text()
    assert re.search(r"^0 passed, 0 failed, 0 errors, \d+ skipped$", report, re.MULTILINE)
    assert "| wde torch_sdpa | float32 | none |" in report
    assert "# wde host overhead: 16 texts" in report and "| LLM.encode from text |" in report
    assert {"gpu-report.md", "gpu-tests.xml", "gpu-tests.log", "gpu-bench.md", "gpu-bench.log"} <= {
        path.name for path in out.iterdir()
    }


def test_decoder_smoke_path_on_cpu(tmp_path: Path, data_dir: Path) -> None:
    """The tiny Qwen3 decoder: sentence-transformers at each batch size, wde fused (the CPU runs the layers
    unfused) with the same embeddings, and the GPU-only rows (unfused, fp8) named as such."""
    text = smoke_report(tmp_path, data_dir, ["--models", "--decoders", "qwen3-tiny"])
    assert "## qwen3-tiny (random Qwen3)" in text
    cells = row_cells(text, "| wde (fused kernels) | float32 |")
    assert float(cells[4].replace(",", "")) > 0 and float(cells[7]) >= 0.9999
    for system in ("wde (unfused)", "wde + fp8"):
        assert f"| {system} | float32 | none | - | - | - | - | - | GPU only | - | - |" in text
    # the first shape's time by kind (on the CPU: ops' self time; the GEMMs are there)
    profile = text[text.index("Kernel time of qwen3-tiny (random Qwen3), wde fused, float32") :]
    assert re.search(r"\| GEMM \| [\d.,]+ \| \d+\.\d%", profile), profile
    assert "| largest kernels | kind | ms |" in profile
    # a quantization's accuracy on real weights (the GPU: fp8; here int8): cosine and MRR@10 on rerank.jsonl
    quality = re.search(
        r"- int8 on real weights \(all-MiniLM-L6-v2, float32\): cosine to unquantized min (\S+),", text
    )
    assert quality is not None and float(quality[1]) >= 0.99, text[text.index("Kernel time of") :]
    assert re.search(r"MRR@10 on 5 rerank\.jsonl queries \d\.\d{4} against \d\.\d{4} unquantized", text)


def test_decoder_targets_are_read_off_the_tables() -> None:
    from benchmarks.gpu_decoders import DecoderTable, decoder_target_lines

    table = DecoderTable("qwen3-0.6b (random Qwen3)", "/x", 440_000_000, peer_tokens_per_s=40_000.0)
    table.rows = [
        Row("sentence-transformers (batch 256)", "float16", tokens_per_s=40_000.0),
        Row("wde (fused kernels)", "float16", "lazy", 9.0, 100_000.0, 0.9999),
        Row("wde + fp8", "float16", "lazy", 9.0, 160_000.0, 0.998),
        Row("wde + fp8", "bfloat16", "lazy", 9.0, 120_000.0, 0.998),
    ]
    table.fp8_min_cosines = {"float16": 0.9995, "bfloat16": 0.9985}
    lines = decoder_target_lines([table], "float16", peak=800e12)
    assert lines[0] == "## Decoder targets (issue 51)"
    assert "fused 11.0% of the bf16 matmul peak (target >= 35%: NOT met)" in lines[2]
    assert "fused 2.50x the best sentence-transformers row (target >= 2x: met)" in lines[3]
    assert (
        "fp8 (float16 activations) 1.60x fused float16 (target >= 1.5x: met), min cosine 0.99950" in lines[4]
    )
    assert "fp8 (bfloat16 activations) 1.20x fused float16 (target >= 1.5x: NOT met)" in lines[5]
    assert "min cosine 0.99850 against it (target >= 0.999: NOT met)" in lines[5]


def test_targets_are_read_off_the_tables() -> None:
    from benchmarks.gpu_modes import ModelTable

    base = ModelTable("BERT-base (random weights)", "/x", 85_000_000, peer_tokens_per_s=100_000.0)
    base.rows = [
        Row("sentence-transformers (batch 32)", "float16", tokens_per_s=100_000.0, min_cosine=0.9999),
        Row("wde torch_varlen", "float16", "lazy", 3.0, 180_000.0, 0.99995),
        Row("wde torch_sdpa", "float16", "none", 2.0, 120_000.0, 0.9985),
        Row("wde torch_varlen", "bfloat16", "lazy", 3.0, 400_000.0, 0.99),  # another dtype: not counted
    ]
    minilm = ModelTable("all-MiniLM-L6-v2 (bundled)", "/y", 10_000_000, peer_tokens_per_s=1.0)
    minilm.rows = [
        Row("wde torch_varlen", "float16", "lazy", 6.5, 1.0),
        Row("wde torch_varlen", "float16", "none", 1.0, 1.0),
    ]
    lines = gpu_modes.acceptance_lines([minilm, base], "float16")
    assert lines[0] == "## Targets"
    assert "lazy-graph start-up 6.50 s (wde torch_varlen, float16; target < 5 s: NOT met)" in lines[2]
    assert "1.80x sentence-transformers (target >= 1.5x: met)" in lines[3]
    assert "min cosine vs ST float32 0.99850 (target >= 0.999: NOT met)" in lines[3]


def test_fp8_parts_time_the_linears_wde_builds() -> None:
    """benchmarks.fp8_gemm's linears for the 0.6B shape: q/k/v and gate/up fused as the model fuses them
    (28 layers of these: the 440M matmul parameters of the decoder table, embeddings aside)."""
    from benchmarks.fp8_gemm import linear_shapes
    from benchmarks.random_decoder import DECODER_SHAPES

    shapes = linear_shapes(DECODER_SHAPES["qwen3-0.6b"])
    assert shapes == {"qkv": (1024, 4096), "o": (2048, 1024), "gate_up": (1024, 6144), "down": (3072, 1024)}
    assert 28 * sum(a * b for a, b in shapes.values()) == 440_401_920
