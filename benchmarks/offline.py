"""Offline throughput: ``LLM.encode`` against ``SentenceTransformer.encode`` and peer engines on the same
texts and model, in one run and one table: tokens/s and texts/s (min / median / max over repeats), useful
GFLOP/s against a ``F.linear`` peak measured in the same run (benchmarks.flops), and for every row its
quality, so a speed-up cannot hide a wrong answer: min and mean cosine of its embeddings against
sentence-transformers float32, and MRR@10 / recall@1 of the cosine ranking its embeddings give on
``--rerank-data`` (queries and candidates embedded; the two columns are left out, with a note, when that file
is missing). Every ratio is against sentence-transformers float32; with ``--dtype bfloat16``
sentence-transformers bfloat16, wde and the Infinity / vLLM peers run in bfloat16 too, while the st-* peers
keep their own precision (``st-openvino`` is OpenVINO's default: bfloat16 on a CPU with native bfloat16, so
``--dtype fast --peer st-openvino`` sets wde's fast mode beside it). ``--dtype fast`` resolves as
``LLM(dtype="fast")`` does on this CPU (the header says to what, and why).

Timing: sentence-transformers, the wde rows (one per ``--quantization``) and the st-* peers (workers that
stay loaded: benchmarks.st_peers) are warmed up once, then timed interleaved, one pass of each in turn per
repeat (benchmarks.interleave). Infinity and vLLM are started, timed (their repeats back to back) and stopped
one after the other, after that. Every system gets the same thread count (``--threads``, default torch's: all
cores) and sentence-transformers' batch size (``--st-batch-size``). int8 rows show GFLOP/s against the
float32 peak (no int8 peak is measured).

    python -m benchmarks.offline --data ../shared/data/docs.jsonl
    python -m benchmarks.offline --limit 2000 --quantization none --quantization int8 \\
        --peer st-onnx --peer st-onnx-int8 --peer st-openvino --peer st-openvino-f32 --peer st-openvino-int8
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import peers, st_peers
from benchmarks.cpu_info import cpu_flags, cpu_model, isa_flags, onnx_int8_config
from benchmarks.dataset import BenchmarkDataError, load_texts, shared_data_path
from benchmarks.flops import encoder_flops, matmul_peak_gflops
from benchmarks.interleave import InProcessSystem, System, time_interleaved
from benchmarks.quality import Quality, RerankSet, quality, quality_cells, rerank_set
from benchmarks.rerank_quality import load_records
from wde.layers.packed_linear import FLOAT_GEMMS, GEMM_ENV

QUANTIZATIONS = ("none", "int8")


@dataclass(frozen=True)
class PeerOptions:
    """What the st-* peer workers of ``time_rows`` are started with."""

    texts: list[str]  # the timed texts
    threads: int
    batch_size: int
    calibration: dict | None  # st-openvino-int8's (``calibration``)


@dataclass
class Timing:
    name: str
    seconds: list[float]
    num_tokens: int
    num_texts: int
    flops: int  # useful FLOPs of one pass over the texts (benchmarks.flops.encoder_flops)
    peak_gflops: float  # linear peak of this row's dtype, measured in the same run
    quality: Quality | None = None  # None: the system gave no embeddings to check

    def tokens_per_s(self, seconds: float) -> float:
        return self.num_tokens / seconds

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def gflops(self) -> float:
        """Useful GFLOP/s of the median pass."""
        return self.flops / self.median / 1e9

    def row(self, baseline: Timing, with_rerank: bool = False) -> str:
        """A markdown table row; the ratio is throughput over the baseline's (medians), GFLOP/s also as a
        share of the measured matmul peak; the quality cells before the ratio."""
        best, median, worst = min(self.seconds), self.median, max(self.seconds)
        gflops = self.gflops
        ratio = f"{baseline.median / median:.2f}x"
        cells = " | ".join(quality_cells(self.quality, with_rerank))
        return (
            f"| {self.name} | {self.tokens_per_s(median):,.0f} | {self.tokens_per_s(worst):,.0f} / "
            f"{self.tokens_per_s(best):,.0f} | {self.num_texts / median:,.1f} | "
            f"{gflops:,.1f} ({gflops / self.peak_gflops:.0%} of peak) | {cells} | "
            f"{ratio} |"
        )


def wde_embeddings(engine: Any, batch: list[str]) -> np.ndarray:
    """``[num_texts, dim]`` dense embeddings of ``batch`` from an ``LLM``."""
    return np.stack([output.embedding for output in engine.encode(batch)])


def st_system(model_path: str, dtype: str, batch_size: int, texts: list[str]) -> InProcessSystem:
    """``SentenceTransformer.encode`` in ``dtype`` as an interleaved system (in float32: the reference)."""
    import torch
    from sentence_transformers import SentenceTransformer

    st_model = SentenceTransformer(
        model_path, device="cpu", model_kwargs={"torch_dtype": getattr(torch, dtype)}
    )
    return InProcessSystem(
        f"sentence-transformers {dtype} (batch {batch_size})",
        dtype,
        functools.partial(st_model.encode, batch_size=batch_size, convert_to_numpy=True),
        texts,
    )


def time_rows(
    systems: list[System],
    peer_names: list[str],
    model_path: str,
    repeats: int,
    rerank: RerankSet | None,
    timing: Callable[[str, str, list[float], Quality | None], Timing],
    peer_options: PeerOptions,
    announce: Callable[[str], None] = print,
    load_failures: list[str] | None = None,
) -> list[Timing]:
    """The st-* peers ``peer_names`` started beside ``systems`` (the first of which is the float32
    reference), every one warmed up and timed interleaved, then each row's quality: cosine against the
    reference and, with ``rerank``, its ranking. ``announce`` gets the line naming the systems timed. The peer
    workers are closed before this returns. ``load_failures``: a peer that cannot load the model is left out
    with a line here (else it raises: ``st_peers.running``)."""
    with st_peers.running(
        peer_names,
        model_path,
        peer_options.texts,
        peer_options.threads,
        peer_options.batch_size,
        peer_options.calibration,
        load_failures,
    ) as workers:
        timed = [*systems, *workers]
        announce(
            f"# timed interleaved (one warm-up round, then {repeats} timed): "
            + ", ".join(system.label for system in timed)
        )
        seconds = time_interleaved(timed, repeats, progress)
        reference = timed[0].last_embeddings()
        rows = []
        for system, system_seconds in zip(timed, seconds, strict=True):
            rerank_embeddings = system.embed(rerank.texts) if rerank else None
            value = quality(system.last_embeddings(), reference, rerank_embeddings, rerank)
            rows.append(timing(system.label, system.dtype, system_seconds, value))
    return rows


def table_header(with_rerank: bool) -> str:
    quality_columns = "min cosine | mean cosine" + (" | MRR@10 | recall@1" if with_rerank else "")
    columns = (
        "system | tokens/s (median) | tokens/s (min / max) | texts/s | useful GFLOP/s | "
        f"{quality_columns} | vs sentence-transformers float32"
    )
    return f"| {columns} |\n|{'---|' * (columns.count('|') + 1)}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wde bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="wde bench --server URL [--concurrency 1 32 ...]: the HTTP load benchmark against a running "
        "server instead (wde bench --server URL --help lists its flags).",
    )
    parser.add_argument("--data", default=shared_data_path("docs.jsonl"))
    parser.add_argument(
        "--model", default=None, help="local HF directory (default: bundled all-MiniLM-L6-v2)"
    )
    parser.add_argument("--limit", type=int, default=None, help="use the first N texts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16", "fast"],
        help="wde's dtype (and a sentence-transformers row in it); fast: what LLM(dtype='fast') picks on "
        "this CPU (bfloat16 where it computes it natively, else float32)",
    )
    parser.add_argument(
        "--quantization",
        action="append",
        choices=QUANTIZATIONS,
        default=None,
        help="one wde row per value (repeatable; default: none): none, or int8 (LLM(quantization='int8'))",
    )
    parser.add_argument(
        "--st-batch-size", type=int, default=32, help="batch size of sentence-transformers and the st-* peers"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads of every system: torch intra-op threads here, and the st-* peers' (default: torch's)",
    )
    parser.add_argument("--executor", default="auto", choices=["auto", "sync", "async"])
    parser.add_argument(
        "--attention-backend",
        action="append",
        default=None,
        help="one wde row per value (repeatable, times each quantization; default: auto), e.g. "
        "--attention-backend varlen_cpu --attention-backend torch_sdpa; the last lines then give the min "
        "cosine between the first wde row and each other",
    )
    parser.add_argument(
        "--float-gemm",
        action="append",
        default=None,
        choices=["auto", *FLOAT_GEMMS],
        help="one wde row per value (repeatable, times each quantization and backend; default: auto, the "
        "load-time measurement): the float32 block linears' GEMM, as WDE_FLOAT_GEMM forces it",
    )
    parser.add_argument("--max-num-batched-tokens", type=int, default=None)
    parser.add_argument("--compile", action="store_true", help="torch.compile wde's MLP blocks")
    parser.add_argument(
        "--rerank-data",
        default=shared_data_path("rerank.jsonl"),
        help="labelled rerank set for the MRR@10 / recall@1 columns (default: the shared rerank.jsonl)",
    )
    parser.add_argument("--rerank-limit", type=int, default=None, help="use the first N rerank queries")
    parser.add_argument(
        "--calibration-data",
        default=shared_data_path("docs.jsonl"),
        help=f"st-openvino-int8 calibrates on the last {st_peers.CALIBRATION_TEXTS} texts of this file, "
        "which must not be timed (default: the shared docs.jsonl)",
    )
    parser.add_argument(
        "--peer",
        action="append",
        default=[],
        choices=peers.PEER_NAMES,
        help="also time a peer engine from its own venv (repeatable): infinity (`make peer-infinity`), "
        "vllm (`make peer-vllm`), st-onnx and st-onnx-int8 (`make peer-st-onnx`), st-openvino (OpenVINO's "
        "default precision hint: bf16 on CPUs with native bf16), st-openvino-f32 (float32 forced) and "
        "st-openvino-int8 / st-openvino-int8-f32 (static int8; default / f32 hint for the rest) "
        "(`make peer-st-openvino`)",
    )
    return parser


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, before loading anything, what cannot run: missing peer venvs, an int8 wde row on a wde without
    the quantization argument, an ONNX int8 peer on a CPU no config fits. Resolves ``--dtype fast``."""
    args.quantization = list(dict.fromkeys(args.quantization or ["none"]))
    args.attention_backend = list(dict.fromkeys(args.attention_backend or ["auto"]))
    args.float_gemm = list(dict.fromkeys(args.float_gemm or ["auto"]))
    args.peer = list(dict.fromkeys(args.peer))
    if missing_peers := peers.missing(args.peer):
        parser.error("\n".join(missing_peers))
    args.dtype_note = ""
    if args.dtype == "fast":
        from wde.platforms.cpu import CpuPlatform

        args.dtype, why = CpuPlatform().fast_dtype({})
        args.dtype_note = f" (--dtype fast: {why})"
    if "int8" in args.quantization and not wde_has_quantization():
        parser.error("--quantization int8: this wde's LLM has no quantization argument yet; use none")
    if "st-onnx-int8" in args.peer:
        try:
            onnx_int8_config(cpu_flags())
        except ValueError as e:
            parser.error(str(e))


def wde_has_quantization() -> bool:
    from wde.engine_args import EngineArgs

    return "quantization" in EngineArgs.field_names()


def build_llm(
    model_path: str,
    args: argparse.Namespace,
    quantization: str,
    attention_backend: str,
    float_gemm: str = "auto",
    dtype: str | None = None,
) -> Any:
    """wde's LLM for one --quantization, --attention-backend and --float-gemm value, in ``dtype`` (default:
    ``args.dtype``); quantization is passed only when not none, so that a wde without it still runs the none
    row."""
    from wde import LLM

    extra = {} if quantization == "none" else {"quantization": quantization}
    saved = os.environ.pop(GEMM_ENV, None)
    if float_gemm != "auto":
        os.environ[GEMM_ENV] = float_gemm  # read while the model loads
    try:
        return LLM(
            model_path,
            dtype=dtype or args.dtype,
            executor=args.executor,
            max_num_batched_tokens=args.max_num_batched_tokens,
            compile_model=args.compile,
            attention_backend=attention_backend,
            **extra,
        )
    finally:
        os.environ.pop(GEMM_ENV, None)
        if saved is not None:
            os.environ[GEMM_ENV] = saved


def wde_label(
    dtype: str, quantization: str, attention_backend: str = "auto", float_gemm: str = "auto"
) -> str:
    label = f"wde LLM.encode {dtype}" + ("" if quantization == "none" else f" {quantization}")
    label += "" if attention_backend == "auto" else f" [{attention_backend}]"
    return label + ("" if float_gemm == "auto" else f" [{float_gemm} GEMM]")


def read_rerank(path: str, limit: int | None) -> RerankSet | None:
    """The rerank set, or None with a printed note when the file is missing."""
    if not Path(path).is_file():
        print(f"# rerank quality: {path} not found, no MRR@10 / recall@1 columns (pass --rerank-data FILE)")
        return None
    return rerank_set(load_records(path, limit))


def calibration(
    parser: argparse.ArgumentParser, peer_names: list[str], calibration_data: str, texts: list[str]
) -> dict | None:
    """The st-openvino-int8 calibration set written to the cache (None when that peer is not asked for)."""
    if not any(name.startswith("st-openvino-int8") for name in peer_names):
        return None
    try:
        chosen = st_peers.calibration_texts(load_texts(calibration_data), texts)
    except BenchmarkDataError as e:
        parser.error(f"st-openvino-int8 calibration texts (--calibration-data): {e}")
    except ValueError as e:
        parser.error(str(e))
    return st_peers.write_calibration(chosen)


def print_header(llm: Any, args: argparse.Namespace, texts: list[str], num_tokens: int, threads: int) -> None:
    engine_config = llm.engine.engine_config
    print(
        f"# {len(texts)} texts, {num_tokens:,} tokens (max_model_len {llm.model_config.max_model_len}), "
        f"dtype {args.dtype}{args.dtype_note}, {threads} threads, "
        f"backend {llm.engine.runner.attn_backend_cls.name}, "
        f"executor {engine_config.device_config.executor}, "
        f"max_num_batched_tokens {engine_config.scheduler_config.max_num_batched_tokens}, "
        f"{args.repeats} repeats"
    )
    print(f"# CPU {cpu_model()}; ISA {' '.join(isa_flags(cpu_flags())) or 'none of avx2 / avx512* / amx*'}")


def progress(line: str) -> None:
    print(f"[bench] {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)

    import torch

    from wde.engine_args import default_model_path

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    model_path = args.model or default_model_path()
    texts = load_texts(args.data, args.limit)
    calibration_set = calibration(parser, args.peer, args.calibration_data, texts)

    llms = {
        (quantization, backend, gemm): build_llm(model_path, args, quantization, backend, gemm)
        for quantization in args.quantization
        for backend in args.attention_backend
        for gemm in args.float_gemm
    }
    llm = next(iter(llms.values()))
    seq_lens = [len(enc.token_ids) for enc in llm.engine.tokenizer.encode_batch(texts)]
    num_tokens, flops = sum(seq_lens), encoder_flops(llm.model_config.hf_config, seq_lens)
    print_header(llm, args, texts, num_tokens, threads)
    # 1. the matmul peak of each dtype in play
    dtypes = dict.fromkeys(["float32", args.dtype])
    peaks = {name: matmul_peak_gflops(llm.model_config.hf_config, getattr(torch, name)) for name in dtypes}
    print(
        f"# useful work {flops / 1e9:,.1f} GFLOP ({flops / num_tokens / 1e6:.1f} MFLOP/token); linear peak "
        "on the largest GEMM in this run: "
        + ", ".join(
            f"{name} {peak:,.1f} GFLOP/s (ceiling {peak * 1e9 * num_tokens / flops:,.0f} tokens/s)"
            for name, peak in peaks.items()
        )
    )
    rerank = read_rerank(args.rerank_data, args.rerank_limit)

    def timing(name: str, dtype: str, seconds: list[float], value: Quality | None) -> Timing:
        return Timing(name, seconds, num_tokens, len(texts), flops, peaks[dtype], value)

    # 2. the systems that stay loaded: sentence-transformers (float32 first: the baseline and the reference),
    #    wde, the st-* peer workers, timed interleaved; 3. the quality of each
    systems: list[System] = [st_system(model_path, dtype, args.st_batch_size, texts) for dtype in dtypes]
    for (quantization, backend, gemm), engine in llms.items():
        systems.append(
            InProcessSystem(
                wde_label(args.dtype, quantization, backend, gemm),
                args.dtype,
                functools.partial(wde_embeddings, engine),
                texts,
            )
        )
    st_names = [name for name in args.peer if name in st_peers.ST_PEERS]
    peer_options = PeerOptions(texts, threads, args.st_batch_size, calibration_set)
    rows = time_rows(systems, st_names, model_path, args.repeats, rerank, timing, peer_options)
    reference = systems[0].last_embeddings()
    print(table_header(rerank is not None))
    for row in rows:
        print(row.row(rows[0], rerank is not None), flush=True)
    # 4. the peers that run alone, one after the other
    for peer in args.peer:
        if peer not in peers.SEQUENTIAL_PEERS:
            continue
        measured = peers.measure(
            peer, model_path, texts, args.dtype, args.repeats, rerank.texts if rerank else None
        )
        value = quality(measured.embeddings, reference, measured.extra_embeddings, rerank)
        for label, peer_seconds in measured.rows:
            row = timing(f"{label} {args.dtype}", args.dtype, peer_seconds, value)
            print(row.row(rows[0], rerank is not None), flush=True)
    # 5. wde's accuracy against the float32 reference, in full
    for system in systems:
        if system.label.startswith("wde "):
            ours = system.last_embeddings()
            cosine = quality(ours, reference)
            print(
                f"{system.label} against sentence-transformers float32: min cosine {cosine.min_cosine:.7f}, "
                f"max abs diff {np.abs(ours - reference).max():.2e}"
            )
    wde_systems = [system for system in systems if system.label.startswith("wde ")]
    for other in wde_systems[1:]:
        cosine = quality(other.last_embeddings(), wde_systems[0].last_embeddings())
        print(f"{other.label} against {wde_systems[0].label}: min cosine {cosine.min_cosine:.7f}")


if __name__ == "__main__":
    main()
