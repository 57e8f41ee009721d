"""The GPU bench's tables: a row per system and configuration, a table per model, the time budget every
row checks, and the markdown a table becomes (``benchmarks.gpu_modes``, ``benchmarks.gpu_decoders``)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from benchmarks.gpu_runs import StRun, WdeRun, measure_sentence_transformers, measure_wde
from benchmarks.quality import row_cosines


@dataclass
class Row:
    system: str  # "wde <backend>" or the peer's name
    dtype: str
    mode: str = "-"
    startup_s: float | None = None
    tokens_per_s: float | None = None
    min_cosine: float | None = None
    captured: list[int] = field(default_factory=list)
    note: str = ""  # why the row was skipped or failed
    ids_tokens_per_s: float | None = None  # from token ids: the engine without its tokenizer
    busy_share: float | None = None  # the GPU's busy share over the timed passes from text


@dataclass
class ModelTable:
    label: str
    path: str
    num_matmul_params: int
    rows: list[Row] = field(default_factory=list)
    peer_tokens_per_s: float | None = None  # the best sentence-transformers row (first dtype)


@dataclass
class Budget:
    seconds: float
    start: float = field(default_factory=time.monotonic)

    def spent(self) -> bool:
        return time.monotonic() - self.start > self.seconds

    def skip_note(self) -> str:
        return f"skipped: the {self.seconds:.0f} s budget is spent"


def one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]


def progress(line: str) -> None:
    print(f"gpu_modes: {line}", file=sys.stderr, flush=True)


def format_table(table: ModelTable, peak: float, peer_dtype: str) -> list[str]:
    """``peer_dtype``: the dtype of the sentence-transformers rows the ratios are against."""
    peer = table.peer_tokens_per_s
    lines = [
        f"## {table.label}: {table.num_matmul_params / 1e6:.1f}M matmul parameters",
        "",
        f"| system | dtype | cuda graphs | start-up s | tokens/s | vs best ST {peer_dtype} "
        "| % of bf16 matmul peak | min cos vs ST float32 | graphs captured | tokens/s from token ids "
        "| GPU busy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in table.rows:
        if row.tokens_per_s is None:
            lines.append(
                f"| {row.system} | {row.dtype} | {row.mode} | - | - | - | - | - | {row.note or '-'} | - | - |"
            )
            continue
        startup = f"{row.startup_s:.2f}" if row.startup_s is not None else "-"
        ratio = f"{row.tokens_per_s / peer:.2f}x" if peer else "-"
        ceiling = 2 * table.num_matmul_params * row.tokens_per_s / peak
        cosine = f"{row.min_cosine:.5f}" if row.min_cosine is not None else "-"
        from_ids = f"{row.ids_tokens_per_s:,.0f}" if row.ids_tokens_per_s is not None else "-"
        busy = f"{row.busy_share:.0%}" if row.busy_share is not None else "-"
        lines.append(
            f"| {row.system} | {row.dtype} | {row.mode} | {startup} | {row.tokens_per_s:,.0f} | {ratio} "
            f"| {ceiling:.1%} | {cosine} | {row.captured or '-'} | {from_ids} | {busy} |"
        )
    return [*lines, ""]


def peer_rows(table: ModelTable, texts: list[str], args: argparse.Namespace) -> StRun:
    """sentence-transformers on ``table``'s model: float32 (the accuracy reference, untimed, returned) and the
    first dtype at each ``--st-batch-size``, a row each (the ratios are against the best of them)."""
    batch_sizes, dtype = args.st_batch_size, args.dtypes[0]
    reference = measure_sentence_transformers(table.path, texts, 0, args.device, "float32", batch_sizes[0])
    for batch_size in batch_sizes:
        peer = measure_sentence_transformers(table.path, texts, args.repeats, args.device, dtype, batch_size)
        table.peer_tokens_per_s = max(table.peer_tokens_per_s or 0.0, peer.tokens_per_s or 0.0) or None
        cosine = float(row_cosines(peer.embeddings, reference.embeddings).min())
        table.rows.append(
            Row(
                f"sentence-transformers (batch {batch_size})",
                dtype,
                tokens_per_s=peer.tokens_per_s,
                min_cosine=cosine,
            )
        )
    return reference


def fill_row(row: Row, run: WdeRun, reference: np.ndarray) -> None:
    row.startup_s, row.tokens_per_s, row.captured = run.startup_s, run.tokens_per_s, run.captured
    row.ids_tokens_per_s, row.busy_share = run.ids_tokens_per_s, run.busy_share
    assert run.embeddings is not None
    row.min_cosine = float(row_cosines(run.embeddings, reference).min())


def measured_row(
    row: Row,
    table: ModelTable,
    texts: list[str],
    args: argparse.Namespace,
    reference: np.ndarray,
    **measure_args: object,
) -> WdeRun | None:
    """``measure_wde`` on ``table``'s model into ``row`` (None, and the failure in its note, when the
    configuration fails: one row of the report, not the end of it)."""
    label = f"{table.label} {row.system} {row.dtype} {row.mode}"
    try:
        run = measure_wde(table.path, texts, args.repeats, args.device, dtype=row.dtype, **measure_args)
    except Exception as e:
        row.note = f"failed: {one_line(e)}"
        progress(f"{label}: {row.note}")
        return None
    fill_row(row, run, reference)
    progress(f"{label}: {run.tokens_per_s:,.0f} tokens/s")
    return run
