"""What one request costs each of ``wde serve``'s processes (issue 48): a random 1-layer BERT of hidden size
32 (the forward nearly free, so the HTTP and engine-link work shows), N one-text ``POST /embed`` at each
concurrency, every ``--api-workers`` value against the single-process server in the same run.

    python -m benchmarks.serve_cost                                 # --api-workers 1 2, concurrency 32 256
    python -m benchmarks.serve_cost --api-workers 1 2 4 --num-requests 4000 --repeats 3
    make bench-serve-cost

Per server and concurrency: requests/s, then CPU-µs per request of each process, read from /proc (utime +
stime of every thread) for the server's process tree, each process named by its ``comm`` (``wde-supervisor``,
``wde-engine``, ``wde-api-N``, summed as "api": server/observability/process_cpu.py; the single process is
``server``); "beside forward" is the engine process's (or the single server's) CPU less the forward thread's
own (``wde_batch_inference_cpu_seconds``; the servers run with ``OMP_NUM_THREADS=1``, so that thread is the
whole forward); "all" sums every process, and "/ single" divides it by the single-process server's at the
same concurrency. Before measuring, 64 texts are embedded one per request by every server and compared with
the single-process server's answers (max |difference|). The load generator (aiohttp, one process by
default) shares the machine: it lowers requests/s, not a server's CPU per request.

``--per-thread`` adds a table of each process's threads (their OS names: ``main`` for the process's first
thread, the API workers' event loop; wde names its own threads, ``wde/thread_names.py``; a pool's threads and
ZMQ's I/O threads summed by name), CPU-µs per request, medians: where the split's extra CPU goes.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from benchmarks.cpu_info import cpu_flags, cpu_model, isa_flags
from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.http_load import LoadResult, drive_in_processes
from benchmarks.subprocess_server import free_port, serving
from server.observability.process_cpu import cpu_seconds_of

STARTUP_TIMEOUT_S = 300.0
NUM_CHECKED = 64  # texts each server embeds one per request, compared with the single-process server's
WARMUP_REQUESTS = 256
FORWARD_CPU = re.compile(r"^wde_batch_inference_cpu_seconds_total\{[^}]*\} (\S+)$", re.MULTILINE)
SINGLE = 1  # --api-workers of the single-process server
ENGINE_ROLES = ("server", "engine")  # the process that runs the forward
# the columns: "api" sums the API workers (each request passes one: the doors' CPU per request)
ROLES = ("server", "supervisor", "engine", "api", "tokenize")
THREAD_NUMBER = re.compile(r"[_/-]?\d+$")  # a pool's or ZMQ's thread number: wde-forward_0, ZMQbg/IO/0


@dataclass
class Server:
    num_workers: int
    url: str
    pid: int


@dataclass
class Measure:
    requests_per_s: float
    cpu_us: dict[str, float]  # role -> CPU-µs per request (the API workers summed under "api")
    beside_forward_us: float  # the engine's (or single server's) CPU less the forward thread's
    num_errors: int
    # (role, thread name) -> CPU-µs per request, with --per-thread (the API workers' summed under "api")
    thread_us: dict[tuple[str, str], float] = field(default_factory=dict)
    load: LoadResult | None = field(default=None, repr=False)  # the load generator's own (latencies)

    @property
    def all_us(self) -> float:
        return sum(self.cpu_us.values())


@dataclass
class Row:
    num_workers: int
    concurrency: int
    runs: list[Measure] = field(default_factory=list)

    def median(self, value: str) -> float:
        return statistics.median(getattr(run, value) for run in self.runs)

    def median_role(self, role: str) -> float:
        return statistics.median(run.cpu_us.get(role, 0.0) for run in self.runs)

    def has_role(self, role: str) -> bool:
        return any(role in run.cpu_us for run in self.runs)

    def median_threads(self) -> dict[tuple[str, str], float]:
        keys = {key for run in self.runs for key in run.thread_us}
        return {key: statistics.median(run.thread_us.get(key, 0.0) for run in self.runs) for key in keys}


def cpu_seconds(pid: int) -> float:
    seconds = cpu_seconds_of(pid)
    if seconds is None:
        raise RuntimeError(f"cannot read /proc/{pid}/stat: the server's process ended")
    return seconds


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of each of a process's threads by OS name (``/proc/PID/task``): ``main`` for its first
    thread, the threads of a pool (``wde-forward_0``) or ZMQ's I/O threads (``ZMQbg/IO/0``) summed under
    their name less the number."""
    seconds: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        spent = cpu_seconds_of(pid, int(task.name))
        if spent is not None:
            name = "main" if task.name == str(pid) else THREAD_NUMBER.sub("", comm)
            seconds[name] = seconds.get(name, 0.0) + spent
    return seconds


def process_tree(root: int) -> dict[int, str]:
    """pid -> role of ``root`` and its descendants (the role: ``comm`` less its ``wde-`` prefix; the root
    of a single-process server is ``server``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    roles, pending = {}, [root]
    while pending:
        pid = pending.pop()
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        roles[pid] = comm.removeprefix("wde-") if comm.startswith("wde-") else "server"
        pending += children.get(pid, [])
    # helpers of multiprocessing (its resource tracker) are not the server's: keep the named ones
    return {pid: role for pid, role in roles.items() if pid == root or role != "server"}


def forward_cpu_seconds(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30.0).text
    return sum(float(value) for value in FORWARD_CPU.findall(text))


def measure(
    server: Server, texts: list[str], concurrency: int, client_processes: int, per_thread: bool = False
) -> Measure:
    tree = process_tree(server.pid)
    before = {pid: cpu_seconds(pid) for pid in tree}
    threads_before = {pid: thread_cpu_seconds(pid) for pid in tree} if per_thread else {}
    forward_before = forward_cpu_seconds(server.url)
    result = drive_in_processes(server.url, texts, concurrency, client_processes)
    forward = forward_cpu_seconds(server.url) - forward_before
    spent = {pid: cpu_seconds(pid) - before[pid] for pid in tree}
    num = result.num_requests
    cpu_us: dict[str, float] = {}
    for pid, seconds in spent.items():
        role = _role(tree[pid])
        cpu_us[role] = cpu_us.get(role, 0.0) + seconds / num * 1e6
    thread_us: dict[tuple[str, str], float] = {}
    for pid, threads in threads_before.items():
        for name, seconds in thread_cpu_seconds(pid).items():
            key = (_role(tree[pid]), name)
            thread_us[key] = thread_us.get(key, 0.0) + (seconds - threads.get(name, 0.0)) / num * 1e6
    engine_role = next(role for role in ENGINE_ROLES if role in cpu_us)
    return Measure(
        requests_per_s=result.requests_per_s,
        cpu_us=cpu_us,
        beside_forward_us=cpu_us[engine_role] - forward / num * 1e6,
        num_errors=result.num_errors,
        thread_us=thread_us,
        load=result,
    )


def _role(process_role: str) -> str:
    return re.sub(r"-\d+$", "", process_role)  # api-0, api-1 -> api


def embed_one_by_one(url: str, texts: list[str]) -> np.ndarray:
    with httpx.Client(base_url=url, timeout=60.0) as client:
        rows = []
        for text in texts:
            response = client.post("/embed", json={"inputs": text})
            response.raise_for_status()
            rows.append(response.json()[0])
    return np.array(rows, dtype=np.float32)


@contextmanager
def started(model: Path, num_workers: int) -> Iterator[Server]:
    port = free_port()
    command = [sys.executable, "-m", "server.cli", "serve", str(model), "--port", str(port)]
    command += ["--dtype", "float32", "--api-workers", str(num_workers), "--max-concurrent-requests", "4096"]
    url = f"http://127.0.0.1:{port}"
    env = {"OMP_NUM_THREADS": "1", "WDE_LOG_LEVEL": "warning"}
    with serving(
        f"wde serve --api-workers {num_workers}", command, f"{url}/health", STARTUP_TIMEOUT_S, env
    ) as p:
        yield Server(num_workers, url, p.pid)


def tiny_model(scratch: Path) -> Path:
    from benchmarks.host_overhead import HOST_SIZE
    from benchmarks.random_bert import BERT_SIZES, write_random_bert
    from wde.engine_args import default_model_path

    BERT_SIZES.setdefault("host", HOST_SIZE)
    return write_random_bert(scratch / "bert-host", "host", Path(default_model_path()))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=shared_data_path("queries.jsonl"))
    parser.add_argument("--num-requests", type=int, default=3000, help="one-text requests per row and run")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--api-workers", type=int, nargs="+", default=[1, 2], help="1: the single process")
    parser.add_argument(
        "--repeats", type=int, default=1, help="interleaved runs of every row (medians shown)"
    )
    parser.add_argument("--client-processes", type=int, default=1, help="load-generator processes")
    parser.add_argument(
        "--per-thread", action="store_true", help="a second table: each process's threads' CPU-µs per request"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if not Path(args.data).exists():
        print(f"skipped: {args.data} is missing (texts, one JSON object with 'text' per line)")
        return
    texts = load_texts(args.data)
    texts = [texts[index % len(texts)] for index in range(args.num_requests)]
    workers = sorted(set(args.api_workers) | {SINGLE})
    print(f"# CPU: {cpu_model()}; ISA flags: {' '.join(isa_flags(cpu_flags()))}; {os.cpu_count()} CPUs")
    print(f"# load average at start: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    rows = {(n, c): Row(n, c) for n in workers for c in args.concurrency}
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        model = tiny_model(Path(scratch))
        servers = {n: stack.enter_context(started(model, n)) for n in workers}
        # 1. every server answers as the single process does
        expected = embed_one_by_one(servers[SINGLE].url, texts[:NUM_CHECKED])
        differences = {
            n: float(np.abs(embed_one_by_one(server.url, texts[:NUM_CHECKED]) - expected).max())
            for n, server in servers.items()
        }
        for server in servers.values():  # warm-up at the highest concurrency
            drive_in_processes(
                server.url, texts[:WARMUP_REQUESTS], max(args.concurrency), args.client_processes
            )
        # 2. interleaved: each repeat runs every row once
        for _ in range(args.repeats):
            for row in rows.values():
                server = servers[row.num_workers]
                measured = measure(server, texts, row.concurrency, args.client_processes, args.per_thread)
                row.runs.append(measured)
                print(f"  --api-workers {row.num_workers} c{row.concurrency}: {measured}", file=sys.stderr)
    # 3. report
    print(f"# load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(
        f"# {args.num_requests} one-text POST /embed per row from {args.data}, random BERT 1 x 32, float32, "
        f"OMP_NUM_THREADS=1 servers, {args.client_processes} load-generator process(es), medians of "
        f"{args.repeats}; CPU-µs per request"
    )
    roles = [role for role in ROLES if any(role in run.cpu_us for row in rows.values() for run in row.runs)]
    print(
        f"| --api-workers | concurrency | requests/s | {' | '.join(roles)} | engine beside forward | all "
        "| all / single | errors | max diff vs single |"
    )
    print("|" + "---|" * (len(roles) + 8))
    for row in rows.values():
        single = rows[SINGLE, row.concurrency].median("all_us")
        cells = [f"{row.median_role(role):.0f}" if row.has_role(role) else "" for role in roles]
        rate, all_us = row.median("requests_per_s"), row.median("all_us")
        print(
            f"| {row.num_workers} | {row.concurrency} | {rate:,.0f} | {' | '.join(cells)} "
            f"| {row.median('beside_forward_us'):.0f} | {all_us:.0f} | {all_us / single:.2f}x "
            f"| {sum(run.num_errors for run in row.runs)} | {differences[row.num_workers]:.1e} |"
        )
    if args.per_thread:
        print("")
        print("\n".join(thread_table(list(rows.values()))))


def thread_table(rows: list[Row]) -> list[str]:
    """Per server and concurrency, each process's threads that spent at least 1 CPU-µs a request (medians),
    the largest first within a process."""
    lines = [
        "| --api-workers | concurrency | process | thread | CPU-µs per request |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        medians = row.median_threads()
        for (role, name), us in sorted(medians.items(), key=lambda item: (item[0][0], -item[1])):
            if us >= 1.0:
                lines.append(f"| {row.num_workers} | {row.concurrency} | {role} | {name} | {us:.0f} |")
    return lines


if __name__ == "__main__":
    main()
