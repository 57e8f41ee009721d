"""The GPU bench's decoder tables (issue 51): random Qwen3 decoders of Qwen3-Embedding-0.6B's shape and of
the 4B's cut to 8 layers (``benchmarks.random_decoder``), sentence-transformers at each batch size beside
wde with its fused kernels, without them (``WDE_FUSED_KERNELS=0``) and with ``--quantization fp8`` (16-bit
activations in the table's dtype, and in bfloat16):
tokens/s, the share of the bf16 matmul peak, the lowest cosine against sentence-transformers float32,
fp8's against wde's own 16-bit embeddings, where the fp8 row's time goes (``benchmarks.fp8_gemm``), and the
first shape's kernel time by kind (``benchmarks.kernel_profile``); then fp8's accuracy on real weights
(``benchmarks.quantized_quality``: the bundled MiniLM, MRR@10 on ``rerank.jsonl``). On a CPU (``--smoke``)
the tiny shape runs the code path, float32 and fused only (the CPU never fuses; fp8 needs a GPU: the
real-weight line is int8's there)."""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from benchmarks.gpu_tables import Budget, ModelTable, Row, format_table, measured_row, one_line, peer_rows
from benchmarks.quality import row_cosines
from benchmarks.random_bert import count_matmul_params
from benchmarks.random_decoder import write_random_decoder


@dataclass(frozen=True)
class WdeConfiguration:
    system: str  # the row's label
    environment: dict[str, str] = field(default_factory=dict)
    engine_args: dict[str, object] = field(default_factory=dict)
    gpu_only: bool = False
    dtype: str | None = None  # None: the table's (the first --dtypes)


FUSED = WdeConfiguration("wde (fused kernels)")
CONFIGURATIONS = (
    FUSED,
    WdeConfiguration("wde (unfused)", {"WDE_FUSED_KERNELS": "0"}, gpu_only=True),
    WdeConfiguration("wde + fp8", engine_args={"quantization": "fp8"}, gpu_only=True),
    # fp8 with bfloat16 activations: torch._scaled_mm's row-wise kernels write bfloat16 (float16 output, where
    # refused, costs a conversion per GEMM); compared with the fused 16-bit row all the same
    WdeConfiguration("wde + fp8", engine_args={"quantization": "fp8"}, gpu_only=True, dtype="bfloat16"),
)


NUM_PROFILED_TEXTS = 128  # about two full steps of docs texts


@dataclass
class DecoderTable(ModelTable):
    fp8_min_cosines: dict[str, float] = field(default_factory=dict)  # per fp8 row's dtype: against fused


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--decoders",
        nargs="*",
        default=None,
        help="decoder shapes of benchmarks.random_decoder (default qwen3-0.6b qwen3-4b-cut; smoke "
        "qwen3-tiny; the flag alone: no decoder tables)",
    )
    parser.add_argument("--decoder-limit", type=int, default=None, help="docs texts (default 1000; smoke 6)")
    parser.add_argument("--decoder-budget-s", type=float, default=150.0, help="the decoder tables' share")


def apply_defaults(args: argparse.Namespace) -> None:
    if args.decoders is None:
        args.decoders = ["qwen3-tiny"] if args.smoke else ["qwen3-0.6b", "qwen3-4b-cut"]
    args.decoder_limit = args.decoder_limit or (6 if args.smoke else 1000)


def decoder_lines(args: argparse.Namespace, texts: list[str], peak: float, budget: Budget) -> list[str]:
    """Every decoder shape's table, then the issue's targets read off them."""
    share = Budget(args.decoder_budget_s)
    lines: list[str] = []
    tables: list[DecoderTable] = []
    with tempfile.TemporaryDirectory() as scratch:
        for shape in args.decoders:
            if budget.spent() or share.spent():
                lines += [f"## {shape}: {(budget if budget.spent() else share).skip_note()}", ""]
                continue
            try:
                path = write_random_decoder(Path(scratch) / shape, shape, Path(args.minilm), args.device)
                table = DecoderTable(f"{shape} (random Qwen3)", str(path), count_matmul_params(path))
                run_decoder_table(table, texts[: args.decoder_limit], args, [budget, share])
            except Exception as e:
                lines += [f"## {shape}: failed: {one_line(e)}", ""]
                continue
            tables.append(table)
            lines += format_table(table, peak, args.dtypes[0])
            for fp8_dtype, cosine in table.fp8_min_cosines.items():
                lines += [
                    f"fp8 ({fp8_dtype} activations) against wde {args.dtypes[0]}: min cosine {cosine:.5f}"
                ]
            if table.fp8_min_cosines:
                lines += ["", *fp8_part_lines(shape)]
            if shape == args.decoders[0] and not budget.spent():
                lines += kernel_profile_lines(table, texts[:NUM_PROFILED_TEXTS], args)
    if args.decoders and not budget.spent():
        lines += real_weight_lines(args, texts[: args.decoder_limit])
    return lines + decoder_target_lines(tables, args.dtypes[0], peak)


def real_weight_lines(args: argparse.Namespace, texts: list[str]) -> list[str]:
    """fp8's accuracy on real weights (``benchmarks.quantized_quality``: the bundled MiniLM, cosine to its
    16-bit embeddings and MRR@10 on the ``rerank.jsonl`` beside the docs); int8 on a CPU."""
    from benchmarks.quantized_quality import measure, quality_line
    from benchmarks.rerank_quality import load_records

    quantization, dtype = ("fp8", args.dtypes[0]) if args.device == "cuda" else ("int8", "float32")
    rerank = Path(args.docs).parent / "rerank.jsonl"
    if not rerank.is_file():
        return [f"- {quantization} on real weights: skipped, no {rerank}", ""]
    try:
        records = load_records(rerank, 5 if args.smoke else None)
        quality = measure(args.minilm, texts, records, args.device, dtype, quantization)
    except Exception as e:
        return [f"- {quantization} on real weights: failed: {one_line(e)}", ""]
    return [quality_line(quality, quantization, dtype), ""]


def kernel_profile_lines(table: DecoderTable, texts: list[str], args: argparse.Namespace) -> list[str]:
    """``benchmarks.kernel_profile``'s tables for the first shape: wde fused in the first dtype, and with
    fp8 on a GPU (a few seconds each)."""
    from benchmarks.kernel_profile import kernel_seconds, profile_lines

    dtype = args.dtypes[0]
    runs: list[tuple[str, dict[str, Any]]] = [(f"wde fused, {dtype}", {})]
    if args.device == "cuda":
        runs.append((f"wde fused + fp8, {dtype}", {"quantization": "fp8"}))
    lines: list[str] = []
    for label, engine_args in runs:
        full_label = f"{table.label}, {label}, {len(texts)} texts"
        try:
            lines += profile_lines(
                full_label, kernel_seconds(table.path, texts, args.device, dtype, **engine_args)
            )
        except Exception as e:
            lines += [f"Kernel time of {full_label}: failed: {one_line(e)}", ""]
    return lines


def fp8_part_lines(shape: str) -> list[str]:
    """``benchmarks.fp8_gemm``'s table for the shape: where the fp8 row's time goes (a few seconds)."""
    from benchmarks.fp8_gemm import gemm_lines

    try:
        return gemm_lines(shape)
    except Exception as e:
        return [f"fp8 parts of {shape}: failed: {one_line(e)}", ""]


def run_decoder_table(
    table: DecoderTable, texts: list[str], args: argparse.Namespace, budgets: list[Budget]
) -> None:
    """The peer at each batch size (its float32 the accuracy reference), then wde's configurations in the
    first dtype."""
    dtype = args.dtypes[0]
    reference = peer_rows(table, texts, args)
    fused_embeddings: np.ndarray | None = None
    mode = "lazy" if args.device == "cuda" else "none"
    for configuration in CONFIGURATIONS:
        if configuration.dtype == dtype:
            continue  # the table's dtype already: the row without a dtype of its own is this one
        row = Row(configuration.system, configuration.dtype or dtype, mode)
        table.rows.append(row)
        if configuration.gpu_only and args.device != "cuda":
            row.note = "GPU only"
            continue
        spent = next((budget for budget in budgets if budget.spent()), None)
        if spent is not None:
            row.note = spent.skip_note()
            continue
        with mock.patch.dict(os.environ, configuration.environment):
            run = measured_row(
                row, table, texts, args, reference.embeddings, from_ids=False, **configuration.engine_args
            )
        if run is None or run.embeddings is None:
            continue
        if configuration is FUSED:
            fused_embeddings = run.embeddings
        elif configuration.engine_args.get("quantization") == "fp8" and fused_embeddings is not None:
            table.fp8_min_cosines[row.dtype] = float(row_cosines(run.embeddings, fused_embeddings).min())


def decoder_target_lines(tables: list[DecoderTable], dtype: str, peak: float | None) -> list[str]:
    """Issue 51's targets on the Qwen3-Embedding-0.6B shape: fused wde >= 35% of the bf16 matmul peak and
    >= 2x the best sentence-transformers row; fp8 >= 1.5x fused with cosine >= 0.999 against it."""
    lines: list[str] = []
    for table in tables:
        rows = {row.system: row for row in table.rows if row.dtype == dtype}
        fused = rows.get(FUSED.system)
        fp8_rows = [row for row in table.rows if row.system == "wde + fp8"]
        if "0.6b" not in table.label or fused is None or not fused.tokens_per_s:
            continue
        if peak:
            share = 2 * table.num_matmul_params * fused.tokens_per_s / peak
            target = f"target >= 35%: {met(share >= 0.35)}"
            lines.append(f"- {table.label} {dtype}: fused {share:.1%} of the bf16 matmul peak ({target})")
        if table.peer_tokens_per_s:
            ratio = fused.tokens_per_s / table.peer_tokens_per_s
            target = f"target >= 2x: {met(ratio >= 2)}"
            lines.append(
                f"- {table.label} {dtype}: fused {ratio:.2f}x the best sentence-transformers row ({target})"
            )
        for fp8 in fp8_rows:
            cosine = table.fp8_min_cosines.get(fp8.dtype)
            if not fp8.tokens_per_s or cosine is None:
                continue
            ratio = fp8.tokens_per_s / fused.tokens_per_s
            lines.append(
                f"- {table.label}: fp8 ({fp8.dtype} activations) {ratio:.2f}x fused {dtype} (target >= 1.5x: "
                f"{met(ratio >= 1.5)}), min cosine {cosine:.5f} against it (target >= 0.999: "
                f"{met(cosine >= 0.999)})"
            )
    return ["## Decoder targets (issue 51)", "", *lines, ""] if lines else []


def met(condition: bool) -> str:
    return "met" if condition else "NOT met"
