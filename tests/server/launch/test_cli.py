"""The ``wde`` command: flags from EngineArgs / ServerSettings, WDE_* environment, bench forwarding, and a
real ``wde serve`` process that drains in-flight requests on SIGTERM and exits 0."""

from __future__ import annotations

import ast
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from server import cli
from server.settings import ServerSettings
from tests.server.conftest import LONG_TEXT
from tests.server.serve_process import REPO, TIMEOUT, in_flight, serve_process
from wde import EngineArgs


def parse(*argv: str):
    return cli.build_parser().parse_args(["serve", *argv])


def test_every_engine_and_server_field_is_a_flag() -> None:
    args = parse()
    for name in EngineArgs.field_names() + ServerSettings.field_names():
        assert hasattr(args, name), name
    assert args.model == [] and args.host == "127.0.0.1" and args.port == 8000
    assert args.payload_limit == 2_000_000 and args.max_concurrent_requests == 512
    args = parse("/models/x", "--max-num-batched-tokens", "512", "--no-truncate", "--dtype", "bfloat16")
    assert (args.model, args.max_num_batched_tokens, args.truncate, args.dtype) == (
        ["/models/x"],
        512,
        False,
        "bfloat16",
    )


def test_flag_types_follow_the_field_types(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parse("--max-num-batched-tokens", "auto", "--gpu-memory-utilization", "0.5")
    assert (args.max_num_batched_tokens, args.gpu_memory_utilization) == ("auto", 0.5)
    assert parse("--cuda-graph-buckets", "256", "512").cuda_graph_buckets == [256, 512]
    monkeypatch.setenv("WDE_CUDA_GRAPH_BUCKETS", "128, 1024")
    assert parse().cuda_graph_buckets == [128, 1024]


def test_environment_sets_defaults_and_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WDE_MAX_NUM_BATCHED_TOKENS", "1024")
    monkeypatch.setenv("WDE_TRUNCATE", "false")
    monkeypatch.setenv("WDE_API_KEY", "k")
    monkeypatch.setenv("WDE_MODEL", "/models/y")
    monkeypatch.setenv("WDE_PORT", "9000")
    args = parse()
    assert (args.max_num_batched_tokens, args.truncate, args.api_key, args.model, args.port) == (
        1024,
        False,
        "k",
        ["/models/y"],
        9000,
    )
    assert parse("--max-num-batched-tokens", "64", "--port", "1").max_num_batched_tokens == 64


@pytest.mark.parametrize(
    ("name", "value"), [("WDE_PORT", "eighty"), ("WDE_DTYPE", "int4"), ("WDE_TRUNCATE", "maybe")]
)
def test_bad_environment_values_exit_2_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exited:
        cli.build_parser()
    assert exited.value.code == 2 and name in capsys.readouterr().err


def test_serve_refuses_a_bad_model_before_loading(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["serve", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "config.json" in err and err.startswith("wde serve: error: ") and err.count("\n") == 1


def test_serve_refuses_a_negative_batch_wait_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "--max-batch-wait-ms", "-1"]) == 2
    assert "max_batch_wait_ms (-1) must be >= 0" in capsys.readouterr().err


def test_serve_refuses_models_that_cannot_fit_together(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import server.served_models.model_memory

    bundled = EngineArgs().create_engine_config().model_config.model
    monkeypatch.setattr(
        server.served_models.model_memory, "available_bytes", lambda config: 200 * 2**20
    )  # 200 MiB free
    config = tmp_path / "models.yaml"
    config.write_text(
        f"models:\n  - model: {bundled}\n    served_model_name: a\n"
        f"  - model: {bundled}\n    served_model_name: b\n"
    )
    with socket.socket() as busy:  # a port in use: the one-at-a-time run stops there, before loading
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        assert cli.main(["serve", "--model-config", str(config), "--port", port]) == 2
        err = capsys.readouterr().err
        assert (
            err.startswith("wde serve: error: the models cannot be loaded together") and err.count("\n") == 1
        )
        assert "a 0.1" in err and "--max-loaded-models" in err
        assert (
            cli.main(["serve", "--model-config", str(config), "--port", port, "--max-loaded-models", "1"])
            == 2
        )
        assert (
            "cannot be loaded together" not in capsys.readouterr().err
        )  # one at a time fits: the port failed


def test_bench_forwards_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    import benchmarks.offline

    seen: list[list[str]] = []
    monkeypatch.setattr(benchmarks.offline, "main", seen.append)
    assert cli.main(["bench", "--limit", "5", "--repeats", "1"]) == 0
    assert seen == [["--limit", "5", "--repeats", "1"]]


def test_bench_without_its_data_says_what_it_is(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["bench", "--data", str(tmp_path / "docs.jsonl"), "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wde bench: error: benchmark data ") and "../shared/data" in err and "--data" in err


def test_bench_without_the_benchmarks_package_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "benchmarks", None)  # as in the server images, which leave it out
    assert cli.main(["bench", "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wde bench: error: the benchmarks package is not installed")
    assert err.count("\n") == 1


def test_wde_never_imports_the_benchmarks() -> None:
    for path in (REPO / "wde").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(name.split(".")[0] == "benchmarks" for name in names), path


def test_bench_help_shows_the_server_mode(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    assert "wde bench --server URL" in capsys.readouterr().out


def test_entry_point_and_lazy_server_imports() -> None:
    assert 'wde = "server.cli:main"' in (REPO / "pyproject.toml").read_text(encoding="utf-8")
    code = "import sys, server.cli; assert 'fastapi' not in sys.modules and 'uvicorn' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=TIMEOUT)


@pytest.mark.slow  # a real `wde serve` process
def test_sigterm_drains_in_flight_requests_and_exits_0(tmp_path: Path) -> None:
    env = {"WDE_LOG_LEVEL": "warning"}
    with serve_process(tmp_path, "--max-num-batched-tokens", "256", env=env) as server:
        # 1. ready
        server.wait_healthy()
        deadline = time.monotonic() + TIMEOUT
        # 2. in flight: one request whose body is only half sent, so it is certainly unfinished when the
        #    signal arrives (its headers came first; it is admitted once its body is in), then two
        #    requests computing (6 forward passes of 256 tokens)
        body = json.dumps({"inputs": ["sent after SIGTERM", LONG_TEXT]}).encode()
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
        head = (
            "POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        slow.sendall(head.encode() + body[:10])
        results: list[tuple[int, int]] = []

        def post() -> None:
            response = httpx.post(f"{server.url}/embed", json={"inputs": [LONG_TEXT] * 3}, timeout=TIMEOUT)
            results.append((response.status_code, np.asarray(response.json()).shape[0]))

        clients = [threading.Thread(target=post) for _ in range(2)]
        for client in clients:
            client.start()
        while in_flight(server.url) < 2:
            assert time.monotonic() < deadline, "the requests never arrived"
            time.sleep(0.01)
        # 3. SIGTERM: the server stops listening, yet finishes what it admitted, then exits 0
        server.process.send_signal(signal.SIGTERM)
        while _accepts_connections(server.port):
            assert time.monotonic() < deadline, "the server kept listening after SIGTERM"
            time.sleep(0.01)
        slow.sendall(body[10:])
        status, answer = _read_response(slow)
        slow.close()
        for client in clients:
            client.join(TIMEOUT)
        assert server.wait() == 0, server.log()
    assert status == 200 and np.asarray(answer).shape == (2, 384)
    assert results == [(200, 3)] * 2


def _accepts_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _read_response(sock: socket.socket) -> tuple[int, object]:
    """(status, JSON body) of one HTTP/1.1 response with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed in the middle of the body"
        body += chunk
    return int(lines[0].split()[1]), json.loads(body)
