"""``wde serve --api-workers 2`` as a user runs it: the promises of a single-process server across the
processes (drain, the admission bound, a dead engine, a dead worker) and the flags it refuses. The routes
themselves run over an engine process in every server suite (``async_engine``'s "linked" mode)."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import LONG_TEXT
from tests.server.serve_process import in_flight, serve_process, wde_command

TIMEOUT = 90.0
HEAVY = {"inputs": [LONG_TEXT] * 16}  # 16 inputs of 256 tokens: a few hundred ms of CPU work


def engine_pid(log: str) -> int:
    return int(re.search(r"the engine process \(pid (\d+)\)", log).group(1))


def worker_pids(log: str) -> list[int]:
    return [int(pid) for pid in re.findall(r"Started server process \[(\d+)\]", log)]


def post_all(url: str, num_requests: int, body: dict) -> list[httpx.Response]:
    """``num_requests`` POST /embed at once, each on its own connection (spread over the workers)."""
    responses: list[httpx.Response] = []

    def post() -> None:
        responses.append(httpx.post(f"{url}/embed", json=body, timeout=TIMEOUT))

    threads = [threading.Thread(target=post) for _ in range(num_requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    return responses


def process_name(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def assert_refused_soon(url: str, seconds: float = 5.0) -> None:
    """Once the drain has begun, a new connection is refused at once (as one process does), not accepted
    into a backlog that nobody takes it from."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.monotonic()
        try:
            httpx.get(f"{url}/health", timeout=2.0)
        except httpx.ConnectError:
            assert time.monotonic() - start < 1.0
            return
        except httpx.TransportError:  # accepted into a backlog, then dropped: not yet refused
            pass
        time.sleep(0.1)
    raise AssertionError(f"new connections were still accepted {seconds} s into the drain")


def assert_named_and_counted(url: str, parent: int, engine: int, workers: list[int]) -> None:
    """ps tells the processes apart, and /metrics has each one's CPU seconds
    (server/observability/process_cpu.py); the supervisor holds no torch (the engine process reads the
    configs: supervisor.py's EngineStart)."""
    assert process_name(parent) == "wde-supervisor"
    assert "libtorch" not in Path(f"/proc/{parent}/maps").read_text()
    assert process_name(engine) == "wde-engine"
    assert sorted(process_name(pid) for pid in workers) == ["wde-api-0", "wde-api-1"]
    httpx.post(f"{url}/embed", json={"inputs": "counted"}, timeout=TIMEOUT)
    time.sleep(0.2)  # the worker's observations (and CPU time) reach the engine process within 50 ms
    text = httpx.get(f"{url}/metrics", timeout=TIMEOUT).text
    roles = dict(re.findall(r'^wde_process_cpu_seconds_total\{role="([^"]+)"\} (\S+)$', text, re.M))
    assert {"supervisor", "engine"} <= set(roles) and set(roles) & {"api-0", "api-1"}, text
    assert all(float(seconds) > 0 for seconds in roles.values()), roles


@pytest.mark.slow  # a real `wde serve --api-workers 2`: three processes
def test_sigterm_drains_every_admitted_request_then_exits_0(tmp_path: Path) -> None:
    with serve_process(tmp_path, "--api-workers", "2", env={"WDE_LOG_LEVEL": "info"}) as server:
        server.wait_healthy()
        log = server.log()
        assert "2 API workers (--api-workers)" in log and len(worker_pids(log)) == 2, log
        assert_named_and_counted(server.url, server.process.pid, engine_pid(log), worker_pids(log))
        results: list[list[httpx.Response]] = []
        sender = threading.Thread(target=lambda: results.append(post_all(server.url, 8, HEAVY)))
        sender.start()
        deadline = time.monotonic() + TIMEOUT
        while in_flight(server.url) < 8:  # every request admitted (a busy machine takes its time)
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
        server.process.send_signal(signal.SIGTERM)
        assert_refused_soon(server.url)  # while the admitted requests drain
        sender.join(TIMEOUT)
        assert server.wait() == 0, server.log()
        log = server.log()
    (responses,) = results
    assert [response.status_code for response in responses] == [200] * 8, [r.text for r in responses]
    assert all(len(response.json()) == 16 for response in responses)
    assert "draining the API workers, then the engine" in log
    # the engine process (once its model loaded) and each worker (once its app is built): heap_freeze.py
    assert log.count("objects out of the garbage collector's full collections") == 3, log
    assert "Traceback" not in log, log


@pytest.mark.slow
def test_the_admission_bound_counts_the_requests_of_every_worker(tmp_path: Path) -> None:
    args = ("--api-workers", "2", "--max-concurrent-requests", "2")
    with serve_process(tmp_path, *args) as server:
        server.wait_healthy()
        responses = post_all(server.url, 12, {"inputs": [LONG_TEXT] * 48})
    statuses = [response.status_code for response in responses]
    # a bound of 2 per worker would admit 4 at once; the shared count admits 2 (one more at most, when two
    # workers admit in the same instant)
    assert len(statuses) == 12 and 1 <= statuses.count(200) <= 3, statuses
    refused = [response for response in responses if response.status_code == 429]
    assert len(refused) >= 8, statuses
    assert all(response.headers["retry-after"] == "1" for response in refused)
    assert "--max-concurrent-requests" in refused[0].json()["error"]


@pytest.mark.slow
def test_one_request_after_another_is_never_refused_at_a_bound_of_1(tmp_path: Path) -> None:
    """A request's slot is given back before its answer's last bytes leave: the client's next request, on
    a new connection that may reach the other worker, finds nothing in flight."""
    args = ("--api-workers", "2", "--max-concurrent-requests", "1")
    with serve_process(tmp_path, *args) as server:
        server.wait_healthy()
        statuses = [
            httpx.post(f"{server.url}/embed", json={"inputs": "one at a time"}, timeout=TIMEOUT).status_code
            for _ in range(60)
        ]
    assert statuses == [200] * 60, statuses


@pytest.mark.slow
def test_a_dead_engine_process_ends_the_server_with_1(tmp_path: Path) -> None:
    with serve_process(tmp_path, "--api-workers", "2", env={"WDE_LOG_LEVEL": "info"}) as server:
        server.wait_healthy()
        assert httpx.post(f"{server.url}/embed", json={"inputs": "fine"}, timeout=TIMEOUT).status_code == 200
        os.kill(engine_pid(server.log()), signal.SIGKILL)
        killed_at = time.monotonic()
        status = server.wait(TIMEOUT)
        exited_after = time.monotonic() - killed_at
        log = server.log()
    assert status == 1, log
    assert exited_after < 20.0, log
    assert "the engine process ended (exit signal 9) while serving" in log, log


@pytest.mark.slow
def test_a_model_that_fails_to_load_in_the_engine_process_ends_the_server_with_1(tmp_path: Path) -> None:
    """Weights that pass the start-up checks but cannot be read: the engine process says why and ends with
    1, the workers stop, the parent exits 1 (as one process exits 1 when its model fails to load)."""
    from tests.tiny_models import save_tiny_bert

    path = save_tiny_bert(tmp_path / "bert")
    (path / "model.safetensors").write_bytes(b"not a safetensors file")
    with serve_process(tmp_path, str(path), "--api-workers", "2", env={"WDE_LOG_LEVEL": "info"}) as server:
        status = server.wait(TIMEOUT)
        log = server.log()
    assert status == 1, log
    assert "the model failed to load, stopping the server" in log, log
    assert "the engine process ended (exit 1) before its models were ready" in log, log


@pytest.mark.slow
def test_a_dead_worker_is_replaced_and_the_server_goes_on(tmp_path: Path) -> None:
    with serve_process(tmp_path, "--api-workers", "2", env={"WDE_LOG_LEVEL": "info"}) as server:
        server.wait_healthy()
        first, _ = worker_pids(server.log())
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + TIMEOUT
        while len(worker_pids(server.log())) < 3:  # the replacement has started
            assert time.monotonic() < deadline and server.process.poll() is None, server.log()
            time.sleep(0.1)
        server.wait_healthy()
        responses = post_all(server.url, 16, {"inputs": "after a worker died"})
        assert server.process.poll() is None
        server.process.send_signal(signal.SIGTERM)
        assert server.wait() == 0, server.log()
        log = server.log()
    assert [response.status_code for response in responses] == [200] * 16
    assert re.search(rf"API worker \d \(pid {first}\) died with exit -9; starting another", log), log


@pytest.mark.slow
def test_children_end_when_the_parent_is_killed(tmp_path: Path) -> None:
    with serve_process(tmp_path, "--api-workers", "2", env={"WDE_LOG_LEVEL": "info"}) as server:
        server.wait_healthy()
        log = server.log()
        children = [engine_pid(log), *worker_pids(log)]
        server.process.kill()  # SIGKILL: no chance to stop them itself
        server.wait()
        deadline = time.monotonic() + TIMEOUT
        while any(alive(pid) for pid in children):
            assert time.monotonic() < deadline, f"still running: {[p for p in children if alive(p)]}"
            time.sleep(0.1)


def alive(pid: int) -> bool:
    """Running (not a zombie waiting for its dead parent's reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--api-workers", "0"), "--api-workers must be auto or an integer >= 1, got 0"),
        (("--api-workers", "two"), "--api-workers must be auto or an integer >= 1, got 'two'"),
        (("--api-workers", "2", "--ray"), "--api-workers > 1 and --ray"),
        # the configs are read in a process of their own (the supervisor never imports torch): its error
        # still comes back as one line
        (("/no/such/model", "--api-workers", "2"), "'/no/such/model' is not a local directory"),
    ],
)
def test_flags_it_cannot_take_fail_in_one_line(args: tuple[str, ...], needle: str) -> None:
    import subprocess

    result = subprocess.run([*wde_command(), "serve", *args], capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("wde serve: error: ") and needle in last, result.stderr
