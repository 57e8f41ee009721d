"""The GPU bench: wde's tokens/s for each attention backend and each ``--cuda-graph-mode``, in float16 and
bfloat16, on the bundled all-MiniLM-L6-v2 and on randomly initialized BERT-base and BERT-large models
(``benchmarks.random_bert``, written to a temporary directory), next to sentence-transformers on the same
device; first the HTTP server (one text per request at concurrency 64 and 256, 32 texts per request at 64,
the load from several client processes) against in-process encode, with the CPU a request costs each
process and the threads that kept a core busy, then the decoder tables
(``benchmarks.gpu_decoders``: random Qwen3 decoders, fused kernels and fp8), then the encoders'.

    python -m benchmarks.gpu_modes                       # a CUDA machine: the full tables (minutes)
    python -m benchmarks.gpu_modes --device cpu --smoke  # the same code path on a CPU, tiny sizes

Per row: engine start-up seconds (load + profile run + start-up captures), tokens/s of ``LLM.encode`` over the
``docs.jsonl`` texts (median of the timed passes after a warm-up pass) from text and from token ids, the
GPU's busy share over the passes from text, the ratio to the best sentence-transformers row (float16, its
default SDPA attention, at batch 32 and 256), the FLOP ceiling used (2 x matmul parameters x tokens/s over
the device's measured bf16 matmul rate; attention's own FLOPs are left out), the lowest cosine of an
embedding against sentence-transformers float32 (the accuracy), and the graphs captured. ``--budget-s`` caps
the whole run: rows past it are listed as skipped, so a lease of a few minutes is never overrun.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks import gpu_decoders
from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.gpu_runs import (
    matmul_flops_per_s,
)
from benchmarks.gpu_tables import Budget, ModelTable, Row, format_table, measured_row, one_line, peer_rows
from benchmarks.random_bert import count_matmul_params, write_random_bert

if TYPE_CHECKING:
    from benchmarks.serve_cost import Measure

MODES = ("none", "eager", "lazy", "idle")
SERVER_CONCURRENCIES = (64, 256)
TEXTS_PER_BATCHED_REQUEST = 32


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: the code path in a minute on a CPU")
    parser.add_argument("--docs", default=shared_data_path("docs.jsonl"))
    parser.add_argument("--queries", default=shared_data_path("queries.jsonl"))
    parser.add_argument("--limit", type=int, default=None, help="docs texts (default 2000; smoke 12)")
    parser.add_argument("--repeats", type=int, default=None, help="timed passes per row (default 2; smoke 1)")
    parser.add_argument("--dtypes", nargs="+", default=None, help="default float16 bfloat16 (cpu: float32)")
    parser.add_argument(
        "--models",
        nargs="*",
        default=None,
        choices=["minilm", "base", "large", "tiny"],
        help="encoder tables (default minilm base large; smoke minilm tiny; the flag alone: none)",
    )
    parser.add_argument(
        "--minilm",
        default=os.environ.get("WDE_GPU_MODEL"),
        help="folder of the bundled model (default: $WDE_GPU_MODEL, else the installed package's)",
    )
    parser.add_argument("--backends", nargs="+", default=None, help="default: every backend but naive")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument(
        "--st-batch-size",
        type=int,
        nargs="+",
        default=[32, 256],
        help="sentence-transformers' batch sizes, a row each (32: its default; 256: about its best on a GPU)",
    )
    parser.add_argument(
        "--client-processes",
        type=int,
        default=None,
        help="load-generator processes for the HTTP rows (default: a quarter of the cores, 1 to 4)",
    )
    parser.add_argument(
        "--server-requests",
        type=int,
        default=None,
        help="one-text requests per load (default 8192: a couple of seconds at the H200's 5,000 a second; "
        "smoke 16); the 32-text loads send a quarter as many",
    )
    parser.add_argument("--no-server", action="store_true", help="skip the HTTP server part")
    parser.add_argument(
        "--api-workers",
        type=int,
        nargs="+",
        default=None,
        help="wde serve --api-workers for the HTTP rows, a server each (default: 1 4 8 on CUDA, 1 2 on CPU)",
    )
    gpu_decoders.add_arguments(parser)
    parser.add_argument("--budget-s", type=float, default=330.0, help="rows past this many seconds skip")
    parser.add_argument("--out", default=None, help="also write the markdown report to this file")
    return parser


def apply_defaults(args: argparse.Namespace) -> None:
    args.limit = args.limit or (12 if args.smoke else 2000)
    args.repeats = args.repeats or (1 if args.smoke else 2)
    args.dtypes = args.dtypes or (["float16", "bfloat16"] if args.device == "cuda" else ["float32"])
    if args.models is None:
        args.models = ["minilm", "tiny"] if args.smoke else ["minilm", "base", "large"]
    args.server_requests = args.server_requests or (16 if args.smoke else 8192)
    args.api_workers = args.api_workers or ([1, 4, 8] if args.device == "cuda" else [1, 2])
    gpu_decoders.apply_defaults(args)
    if args.minilm is None:
        from wde.engine_args import default_model_path

        args.minilm = default_model_path()


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    apply_defaults(args)
    budget = Budget(args.budget_s)
    lines = [f"# wde GPU bench ({'smoke, ' if args.smoke else ''}{args.device})", ""]
    # 1. the device and its FLOP ceiling
    lines += machine_lines(args.device)
    peak = matmul_flops_per_s(args.device, 512 if args.smoke else 8192)
    rate = f"{peak / 1e12:,.1f} TFLOP/s" if peak >= 1e12 else f"{peak / 1e9:,.1f} GFLOP/s"
    lines += [f"- bf16 matmul rate (measured, [n, n] x [n, n] random data): {rate}", ""]
    # 2. the HTTP server against in-process (first: it is short, and the model tables fill what is left)
    server_report: list[str] = []
    queries = texts_or_note(args.queries, None, server_report)
    if queries is not None and not args.no_server:
        try:
            server_report += server_lines(queries, args, budget)
        except Exception as e:  # a report with the failure beats no report
            server_report += [f"## HTTP server: failed: {one_line(e)}", ""]
    write_report(args, lines + server_report)
    # 3. the decoder tables (issue 51), then the encoders' throughput tables, model by model; the report is
    #    rewritten after each (a timeout keeps them)
    docs = texts_or_note(args.docs, args.limit, lines)
    if docs is not None and args.decoders:
        lines += gpu_decoders.decoder_lines(args, docs, peak, budget)
        write_report(args, lines + server_report)
    tables: list[ModelTable] = []
    if docs is not None:
        with tempfile.TemporaryDirectory() as scratch:
            for model in args.models:
                if budget.spent():
                    lines += [f"## {model}: {budget.skip_note()}", ""]
                    continue
                try:
                    table = model_table(model, Path(args.minilm), Path(scratch), args.device)
                    run_table(table, docs, args, budget)
                except Exception as e:
                    lines += [f"## {model}: failed: {one_line(e)}", ""]
                    continue
                tables.append(table)
                lines += format_table(table, peak, args.dtypes[0])
                write_report(args, lines + server_report)
    print(write_report(args, lines + server_report + acceptance_lines(tables, args.dtypes[0], peak)))


def write_report(args: argparse.Namespace, lines: list[str]) -> str:
    report = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(report)
    return report


def machine_lines(device: str) -> list[str]:
    import torch

    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        name = f"{props.name}, {props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} SMs"
    else:
        from benchmarks.cpu_info import cpu_model

        name = cpu_model()
    return [f"- device: {name}", f"- torch {torch.__version__}, CUDA {torch.version.cuda}"]


def texts_or_note(path: str, limit: int | None, lines: list[str]) -> list[str] | None:
    if not Path(path).is_file():
        lines += [f"skipped: {path} not found (the shared data set; pass --docs / --queries FILE)", ""]
        return None
    return load_texts(path, limit)


def model_table(model: str, bundled: Path, scratch: Path, device: str) -> ModelTable:
    if model == "minilm":
        path = bundled
        label = "all-MiniLM-L6-v2 (bundled)"
    else:
        path = write_random_bert(scratch / f"bert-{model}", model, bundled, device)
        label = f"BERT-{model} (random weights)"
    return ModelTable(label, str(path), count_matmul_params(path))


def run_table(table: ModelTable, texts: list[str], args: argparse.Namespace, budget: Budget) -> None:
    """Rows in the order that matters most if the budget runs out: the peer first, then wde by dtype."""
    import torch

    from wde.layers.attention.selector import BACKENDS

    # 1. sentence-transformers: float32 (the accuracy reference) and the peer rows
    reference = peer_rows(table, texts, args)
    # 2. wde, each dtype x backend x graph mode
    for dtype in args.dtypes:
        for backend in args.backends or [name for name in BACKENDS if name != "naive"]:
            available, reason = BACKENDS[backend].is_available(args.device, getattr(torch, dtype))
            if not available:
                table.rows.append(Row(f"wde {backend}", dtype, note=f"not available: {reason}"))
                continue
            graphs = args.device == "cuda" and BACKENDS[backend].supports_cuda_graphs
            for mode in args.modes if graphs else ["none"]:
                row = Row(f"wde {backend}", dtype, mode)
                table.rows.append(row)
                if budget.spent():
                    row.note = budget.skip_note()
                    continue
                measured_row(
                    row,
                    table,
                    texts,
                    args,
                    reference.embeddings,
                    attention_backend=backend,
                    cuda_graph_mode=mode,
                )


def acceptance_lines(tables: list[ModelTable], dtype: str, peak: float | None = None) -> list[str]:
    """The issues' GPU targets, read off the tables: on BERT-base wde >= 1.5x the best sentence-transformers
    row in the first dtype with cosine >= 0.999 against its float32, and >= 2.5x its batch-256 row; on
    BERT-large >= 40% of the bf16 matmul ``peak``; lazy-graph start-up < 5 s for the bundled model."""
    lines = ["## Targets", ""]
    for table in tables:
        rows = [row for row in table.rows if row.system.startswith("wde") and row.tokens_per_s is not None]
        lines += _issue_36_lines(table, [row for row in rows if row.dtype == dtype], peak)
        if "base" in table.label and table.peer_tokens_per_s:
            ours = [row for row in rows if row.dtype == dtype]
            if ours:
                best = max(ours, key=lambda row: row.tokens_per_s or 0.0)
                ratio = (best.tokens_per_s or 0.0) / table.peer_tokens_per_s
                cosine = min(row.min_cosine for row in ours if row.min_cosine is not None)
                lines.append(
                    f"- {table.label} {dtype}: best wde ({best.system}, graphs {best.mode}) {ratio:.2f}x "
                    f"sentence-transformers (target >= 1.5x: {'met' if ratio >= 1.5 else 'NOT met'}); "
                    f"min cosine vs ST float32 {cosine:.5f} (target >= 0.999: "
                    f"{'met' if cosine >= 0.999 else 'NOT met'})"
                )
        lazy = [row for row in rows if row.mode == "lazy" and row.startup_s is not None]
        if "bundled" in table.label and lazy:
            fastest = min(lazy, key=lambda row: row.startup_s or 0.0)
            seconds = fastest.startup_s or 0.0
            lines.append(
                f"- {table.label}: lazy-graph start-up {seconds:.2f} s ({fastest.system}, {fastest.dtype}; "
                f"target < 5 s: {'met' if seconds < 5 else 'NOT met'})"
            )
    return [*lines, ""] if len(lines) > 2 else []


def _issue_36_lines(table: ModelTable, ours: list[Row], peak: float | None) -> list[str]:
    if not ours:
        return []
    best = max(ours, key=lambda row: row.tokens_per_s or 0.0)
    tokens_per_s = best.tokens_per_s or 0.0
    st_256 = next((row for row in table.rows if row.system == "sentence-transformers (batch 256)"), None)
    if "base" in table.label and st_256 is not None and st_256.tokens_per_s:
        ratio = tokens_per_s / st_256.tokens_per_s
        return [
            f"- {table.label}: best wde {ratio:.2f}x sentence-transformers at batch 256 "
            f"(target >= 2.5x: {'met' if ratio >= 2.5 else 'NOT met'})"
        ]
    if "large" in table.label and peak:
        share = 2 * table.num_matmul_params * tokens_per_s / peak
        return [
            f"- {table.label}: best wde {share:.1%} of the bf16 matmul peak "
            f"(target >= 40%: {'met' if share >= 0.4 else 'NOT met'})"
        ]
    return []


def server_lines(queries: list[str], args: argparse.Namespace, budget: Budget) -> list[str]:
    """wde serve (bundled model, the first dtype): one text per request at concurrency 64 and 256, then 32
    texts per request at 64; the load from ``--client-processes`` processes. Beside each row, the CPU a
    request costs the engine process (``server`` with one process; also less the forward thread's) and the
    API workers (``benchmarks.serve_cost``), and the cores the load generator's processes kept busy (near
    their number: the generator, not the server, caps the row), then the threads that kept a core busy."""
    from benchmarks.http_load import drive_in_processes
    from benchmarks.serve_cost import Server, measure
    from benchmarks.server_load import WARMUP_REQUESTS, in_process_texts_per_s, served_process

    dtype = args.dtypes[0]
    num_processes = args.client_processes or max(1, min(4, (os.cpu_count() or 1) // 4))
    lines = [f"## HTTP server: bundled model, {dtype}, {num_processes} load-generator processes", ""]
    if budget.spent():
        return [*lines, budget.skip_note(), ""]
    num_batches = max(1, args.server_requests // 4)
    num_texts = max(args.server_requests, num_batches * TEXTS_PER_BATCHED_REQUEST)
    cycled = [queries[i % len(queries)] for i in range(num_texts)]
    singles = cycled[: args.server_requests]
    per_batch = TEXTS_PER_BATCHED_REQUEST
    batches = [cycled[i * per_batch : (i + 1) * per_batch] for i in range(num_batches)]
    texts_per_s, _ = in_process_texts_per_s(args.minilm, dtype, cycled[: max(len(singles), 4096)])
    lines += [
        f"in-process LLM.encode: {texts_per_s:,.0f} texts/s (queries.jsonl)",
        "",
        "| API workers | texts per request | concurrency | requests | requests/s | texts/s | p50 ms | p99 ms "
        "| errors | vs in-process | engine process CPU-µs / request (beside forward) | API workers CPU-µs / "
        "request | load-generator cores |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    busy: list[str] = []  # the threads' lines, after the table
    loads = [(1, concurrency, singles) for concurrency in SERVER_CONCURRENCIES]
    loads.append((TEXTS_PER_BATCHED_REQUEST, SERVER_CONCURRENCIES[0], batches))
    for num_workers in args.api_workers:
        if budget.spent():
            lines.append(f"| {num_workers} | {budget.skip_note()} |")
            continue
        serve_args = ["--device", args.device, "--api-workers", str(num_workers)]
        with served_process(args.minilm, dtype, serve_args) as (url, pid):
            drive_in_processes(url, singles[:WARMUP_REQUESTS], SERVER_CONCURRENCIES[0], 1)  # warm-up
            for per_request, concurrency, items in loads:
                if budget.spent():
                    lines.append(f"| {num_workers} | {per_request} | {concurrency} | {budget.skip_note()} |")
                    continue
                measured = measure(Server(num_workers, url, pid), items, concurrency, num_processes, True)
                result = measured.load
                assert result is not None  # measure keeps its load's result
                served_texts_per_s = result.requests_per_s * per_request
                engine_us = measured.cpu_us.get("engine", measured.cpu_us.get("server", 0.0))
                api_us = f"{measured.cpu_us['api']:.0f}" if "api" in measured.cpu_us else "-"
                lines.append(
                    f"| {num_workers} | {per_request} | {concurrency} | {result.num_requests} "
                    f"| {result.requests_per_s:,.0f} | {served_texts_per_s:,.0f} "
                    f"| {result.percentile_ms(50):.1f} | {result.percentile_ms(99):.1f} "
                    f"| {result.num_errors} "
                    f"| {served_texts_per_s / texts_per_s:.0%} "
                    f"| {engine_us:.0f} ({measured.beside_forward_us:.0f}) | {api_us} "
                    f"| {result.client_cpu_s / result.seconds:.1f} of {num_processes} |"
                )
                busy.append(busy_threads_line(num_workers, per_request, concurrency, measured))
    note = "Threads that kept a tenth of a core busy or more (CPU-µs a request x requests/s; per API worker)"
    return [*lines, "", f"{note}:", "", *busy, ""]


def busy_threads_line(num_workers: int, per_request: int, concurrency: int, measured: Measure) -> str:
    """``- --api-workers N, T per request, concurrency C: engine/wde-engine 0.93, api/main 0.61, ...``: the
    cores each thread kept busy, the largest first."""
    rate = measured.requests_per_s
    cores = {}
    for (role, name), us in measured.thread_us.items():
        share = us * rate / 1e6 / (num_workers if role == "api" else 1)
        if share >= 0.1:
            cores[f"{role}/{name}"] = share
    ranked = sorted(cores.items(), key=lambda item: -item[1])
    shown = ", ".join(f"{name} {share:.2f}" for name, share in ranked) or "none"
    return f"- --api-workers {num_workers}, {per_request} per request, concurrency {concurrency}: {shown}"


if __name__ == "__main__":
    main()
