"""Server CPU cost per HTTP request outside the forward pass (issue 26, part 3): N one-text requests at
concurrency 32 to a ``wde serve`` (bundled all-MiniLM-L6-v2, float32), per route.

    python -m benchmarks.request_cost
    python -m benchmarks.request_cost --baseline-ref a9052a2 --repeats 3   # before / after in one run

Per row: the server process's CPU time over the run (``/proc/<pid>/stat`` utime + stime: every thread),
minus the forward pass's CPU (``wde_batch_inference_duration_seconds_sum`` from ``/metrics``, wall seconds,
times the torch threads that run it), divided by N. Rows: ``/embed`` and ``/v1/embeddings`` (a forward per
batch), ``/tokenize`` and ``/embed`` answered by the result cache (no forward: their CPU is all request
cost). The event loop thread's own CPU (``/proc/<pid>/task/<pid>/stat``) is shown beside it: the HTTP
work proper. ``--baseline-ref`` serves the same rows from a git worktree of that ref too, interleaved with
the current tree's (row by row, repeat by repeat), and prints after / before ratios of medians.

The load generator (aiohttp, ``benchmarks/http_load.py``) shares the machine: on 2 cores its CPU competes
with the server's, which lowers requests/s but not the server's CPU-ms per request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.cpu_info import cpu_flags, cpu_model, isa_flags
from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.http_load import drive
from benchmarks.subprocess_server import free_port, serving

REPO_ROOT = Path(__file__).resolve().parent.parent
WARMUP_REQUESTS = 64
STARTUP_TIMEOUT_S = 600.0  # four servers start one after another, on a machine that may be busy
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CACHE_SIZE_MIB = 64
# The commit that added the forward CPU counter (wde_batch_inference_cpu_seconds), applied to an older
# baseline: without it a baseline's forward CPU could only be guessed from wall time, which is far off on a
# busy machine (a preempted forward's wall time is not CPU).
INSTRUMENTATION = "8547adc"
INSTRUMENTED_FILES = (
    "wde/engine/executor.py",
    "wde/engine/stats.py",
    "wde/engine/llm_engine.py",
    "server/metrics.py",  # its path at INSTRUMENTATION (server/observability/metrics.py since)
)
FORWARD_SUM = re.compile(r"^wde_batch_inference_duration_seconds_sum\{[^}]*\} (\S+)$", re.MULTILINE)
FORWARD_CPU = re.compile(r"^wde_batch_inference_cpu_seconds_total\{[^}]*\} (\S+)$", re.MULTILINE)


@dataclass(frozen=True)
class Row:
    name: str
    path: str
    body: Callable[[str], dict[str, Any]]
    cached: bool  # served by the --cache-size server, after a pass that fills the cache
    forward: bool  # runs the forward pass (the slow rows: --forward-requests of them)


ROWS = (
    Row("/embed (forward)", "/embed", lambda text: {"inputs": text}, cached=False, forward=True),
    Row(
        "/v1/embeddings (forward)", "/v1/embeddings", lambda text: {"input": text}, cached=False, forward=True
    ),
    Row("/tokenize (no forward)", "/tokenize", lambda text: {"inputs": text}, cached=False, forward=False),
    Row("/embed cache hit (no forward)", "/embed", lambda text: {"inputs": text}, cached=True, forward=False),
)


@dataclass
class Server:
    tree: str  # "current" or the baseline ref
    url: str
    pid: int


@dataclass(frozen=True)
class Measure:
    requests_per_s: float
    cpu_ms: float  # server process CPU per request, every thread
    loop_cpu_ms: float  # the event loop (main) thread's CPU per request
    forward_ms: float  # forward pass wall time per request
    outside_ms: float  # cpu_ms minus the forward's CPU (forward wall x torch threads)
    num_errors: int


def process_cpu_seconds(pid: int, tid: int | None = None) -> float:
    """utime + stime of the process (all its threads), or of one thread with ``tid``."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = Path(path).read_text().rpartition(")")[2].split()  # after "(comm)": field 3 onwards
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14, 15)


def forward_seconds(url: str) -> tuple[float, float | None]:
    """(forward wall seconds, the forward thread's CPU seconds: None from a server without that counter)."""
    text = httpx.get(f"{url}/metrics", timeout=10.0).text
    cpu = FORWARD_CPU.findall(text)
    wall = sum(float(value) for value in FORWARD_SUM.findall(text))
    return wall, (sum(float(value) for value in cpu) if cpu else None)


def measure(server: Server, row: Row, texts: list[str], concurrency: int, torch_threads: int) -> Measure:
    forward_before = forward_seconds(server.url)
    cpu_before = process_cpu_seconds(server.pid)
    loop_before = process_cpu_seconds(server.pid, server.pid)
    result = asyncio.run(drive(server.url, texts, concurrency, row.path, row.body))
    cpu = process_cpu_seconds(server.pid) - cpu_before
    loop_cpu = process_cpu_seconds(server.pid, server.pid) - loop_before
    forward_after = forward_seconds(server.url)
    forward = forward_after[0] - forward_before[0]
    # the forward's CPU: its thread's, times the torch threads (equal shares of each parallel region);
    # a server without the CPU counter: its wall time, times the threads (an overestimate on a busy machine)
    if forward_after[1] is not None and forward_before[1] is not None:
        forward_cpu = (forward_after[1] - forward_before[1]) * torch_threads
    else:
        forward_cpu = forward * torch_threads
    n = result.num_requests
    return Measure(
        requests_per_s=result.requests_per_s,
        cpu_ms=cpu / n * 1000,
        loop_cpu_ms=loop_cpu / n * 1000,
        forward_ms=forward / n * 1000,
        outside_ms=(cpu - forward_cpu) / n * 1000,
        num_errors=result.num_errors,
    )


@contextmanager
def baseline_tree(ref: str) -> Iterator[Path]:
    """A ``git worktree`` of ``ref`` under /tmp, removed at the end; one older than the forward CPU counter
    gets it (``INSTRUMENTATION``: measurement only), so that both trees' forward CPU is measured alike."""
    path = Path(f"/tmp/wde-request-cost-{os.getpid()}")
    subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=REPO_ROOT, check=True)
    try:
        # server/metrics.py before server/ was grouped by role, server/observability/metrics.py after
        metrics = [path / "server" / "metrics.py", path / "server" / "observability" / "metrics.py"]
        texts = [file.read_text() for file in metrics if file.is_file()]
        if not any("wde_batch_inference_cpu_seconds" in text for text in texts):
            patch = subprocess.run(
                ["git", "show", INSTRUMENTATION, "--", *INSTRUMENTED_FILES],
                cwd=REPO_ROOT,
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(["git", "apply", "-"], cwd=path, input=patch, check=True)
            print(f"# {ref}: with the forward CPU counter of {INSTRUMENTATION} applied", flush=True)
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO_ROOT, check=False)


@contextmanager
def started(tree: str, root: Path, extra_args: list[str]) -> Iterator[Server]:
    """``wde serve`` from ``root`` (the same python, ``PYTHONPATH`` = ``root``) until the block ends."""
    port = free_port()
    command = [sys.executable, "-m", "server.cli", "serve", "--port", str(port), "--dtype", "float32"]
    command += ["--max-concurrent-requests", "4096", *extra_args]
    url = f"http://127.0.0.1:{port}"
    env = {"PYTHONPATH": str(root)}
    with serving(f"wde serve ({tree})", command, f"{url}/health", STARTUP_TIMEOUT_S, env, str(root)):
        yield Server(tree, url, _listener_pid(port))


def _listener_pid(port: int) -> int:
    """The pid of the process listening on ``port`` (the server; ``python -m`` runs in the Popen's pid,
    but asking the socket table does not depend on that)."""
    inode = _listening_inode(port)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) == f"socket:[{inode}]":
                    return int(entry.name)
        except OSError:
            continue
    raise RuntimeError(f"no process listens on port {port}")


def _listening_inode(port: int) -> str:
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # 0A: LISTEN
            return fields[9]
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def encode_texts_per_s(llm: Any, texts: list[str]) -> float:
    """``LLM.encode`` on all texts at once (after a warm-up call), texts per second."""
    llm.encode(texts[:32])
    start = time.perf_counter()
    llm.encode(texts)
    return len(texts) / (time.perf_counter() - start)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=shared_data_path("queries.jsonl"))
    parser.add_argument("--num-requests", type=int, default=1000, help="requests per row and run (N)")
    parser.add_argument(
        "--forward-requests", type=int, default=500, help="N of the rows that run the forward (slower)"
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="runs of every row per tree (medians shown)")
    parser.add_argument("--baseline-ref", default=None, help="git ref served beside the current tree")
    parser.add_argument("--no-in-process", action="store_true", help="skip the in-process LLM.encode row")
    args = parser.parse_args(argv)
    if not Path(args.data).exists():
        print(f"skipped: {args.data} is missing (short queries, one JSON object with 'text' per line)")
        return
    texts = load_texts(args.data)[: args.num_requests]
    import torch

    from wde import LLM

    torch_threads = torch.get_num_threads()  # the server's default too (it sets none)
    print(f"# CPU: {cpu_model()}; ISA flags: {' '.join(isa_flags(cpu_flags()))}; {os.cpu_count()} CPUs")
    print(f"# load average at start: {load_average()}")
    # 1. in process: an LLM in this process, measured once per repeat between the servers' rows (this
    #    machine's speed drifts by 20% over minutes: a ratio of runs taken apart would show the drift)
    llm = None if args.no_in_process else LLM(None, dtype="float32")
    in_process: list[float] = []
    # 2. the servers: per tree, one default and one with the result cache
    results: dict[tuple[str, str], list[Measure]] = {}
    with ExitStack() as stack:
        trees = [("current", REPO_ROOT)]
        if args.baseline_ref:
            trees.insert(0, (args.baseline_ref, stack.enter_context(baseline_tree(args.baseline_ref))))
        servers: dict[tuple[str, bool], Server] = {}
        for tree, root in trees:
            servers[tree, False] = stack.enter_context(started(tree, root, []))
            cache_args = ["--cache-size", str(CACHE_SIZE_MIB)]
            servers[tree, True] = stack.enter_context(started(tree, root, cache_args))
        for (_, cached), server in servers.items():  # warm-up; the cache servers get every text (filled)
            for row in ROWS:
                if row.cached == cached:
                    asyncio.run(
                        drive(server.url, texts[:WARMUP_REQUESTS], args.concurrency, row.path, row.body)
                    )
            if cached:  # 32 texts per request: the cache keeps each input's output
                batches = [texts[start : start + 32] for start in range(0, len(texts), 32)]
                asyncio.run(drive(server.url, batches, 4, "/embed", lambda batch: {"inputs": batch}))
        # 3. interleaved: each repeat runs in process, then every row on every tree in turn
        for _ in range(args.repeats):
            if llm is not None:
                in_process.append(encode_texts_per_s(llm, texts[: args.forward_requests]))
                print(f"  in process: {in_process[-1]:,.1f} texts/s", file=sys.stderr, flush=True)
            for row in ROWS:
                for tree, _root in trees:
                    server = servers[tree, row.cached]
                    row_texts = texts[: args.forward_requests] if row.forward else texts
                    measured = measure(server, row, row_texts, args.concurrency, torch_threads)
                    print(f"  {row.name} [{tree}]: {measured}", file=sys.stderr, flush=True)
                    results.setdefault((row.name, tree), []).append(measured)
    # 4. report
    print(f"# load average at end: {load_average()}")
    texts_per_s = statistics.median(in_process) if in_process else None
    if texts_per_s:
        each = ", ".join(f"{run:,.1f}" for run in in_process)
        print(f"in-process LLM.encode of the forward rows' texts: {texts_per_s:,.1f} texts/s (runs: {each})")
    print(
        f"# {len(texts)} one-text requests per row ({min(len(texts), args.forward_requests)} for the forward "
        f"rows) from {args.data}, concurrency {args.concurrency}, "
        f"float32, medians of {args.repeats}; outside forward = server CPU - the forward thread's CPU "
        f"(wde_batch_inference_cpu_seconds; else the forward's wall time) x {torch_threads} torch threads"
    )
    print(
        "| row | tree | requests/s | server CPU ms/req | event loop CPU ms/req | forward ms/req "
        "| outside forward CPU ms/req | errors | vs in-process |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    medians: dict[tuple[str, str], dict[str, float]] = {}
    for row in ROWS:
        for tree, _root in trees:
            runs = results[row.name, tree]
            median = {
                field: statistics.median(getattr(run, field) for run in runs)
                for field in ("requests_per_s", "cpu_ms", "loop_cpu_ms", "forward_ms", "outside_ms")
            }
            medians[row.name, tree] = median
            ratio = "n/a"
            if texts_per_s and row.path == "/embed" and not row.cached:
                ratio = f"{median['requests_per_s'] / texts_per_s:.0%}"
            print(
                f"| {row.name} | {tree} | {median['requests_per_s']:,.0f} | {median['cpu_ms']:.3f} | "
                f"{median['loop_cpu_ms']:.3f} | {median['forward_ms']:.3f} | {median['outside_ms']:.3f} | "
                f"{sum(run.num_errors for run in runs)} | {ratio} |"
            )
    if args.baseline_ref:
        print(f"\nafter / before ({args.baseline_ref}):")
        print("| row | requests/s | server CPU ms/req | event loop CPU ms/req | outside forward CPU ms/req |")
        print("|---|---|---|---|---|")
        for row in ROWS:
            after, before = medians[row.name, "current"], medians[row.name, args.baseline_ref]
            print(
                f"| {row.name} | {after['requests_per_s'] / before['requests_per_s']:.2f}x | "
                f"{after['cpu_ms'] / before['cpu_ms']:.2f}x | "
                f"{after['loop_cpu_ms'] / before['loop_cpu_ms']:.2f}x | "
                f"{after['outside_ms'] / before['outside_ms']:.2f}x |"
            )


if __name__ == "__main__":
    main()
