"""``wde serve`` start-up as a user meets it: a folder without tokenizer files or weights, and a busy port,
fail in one line with exit code 2 before any port is bound or any weight is loaded; a good start logs
"listening", then one "ready" line with the URL, then one access line per request."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.server.serve_process import REPO, TIMEOUT, free_port, serve_process, wde_command
from tests.tiny_models import BERT_TOKENIZER_FILES, save_tiny_bert


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*wde_command(), "serve", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, **(env or {})},
    )


def _one_line_error(result: subprocess.CompletedProcess[str], needle: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("wde serve: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert needle in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "listening" not in result.stderr + result.stdout and "loading" not in result.stderr + result.stdout


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("startup-bert"))


def test_folder_without_tokenizer_fails_in_one_line(tmp_path: Path, bert_dir: Path) -> None:
    path = tmp_path / "no-tokenizer"
    shutil.copytree(bert_dir, path, ignore=shutil.ignore_patterns(*BERT_TOKENIZER_FILES))
    _one_line_error(_serve(str(path), "--port", str(free_port())), "no tokenizer files")


def test_folder_without_weights_fails_in_one_line(tmp_path: Path, bert_dir: Path) -> None:
    path = tmp_path / "no-weights"
    shutil.copytree(bert_dir, path, ignore=shutil.ignore_patterns("*.safetensors"))
    result = _serve(str(path), "--port", str(free_port()))
    _one_line_error(result, "has no weights (model.safetensors or pytorch_model.bin)")
    assert "--model" not in result.stderr  # there is no such flag: the model is the first argument


def test_busy_port_fails_before_the_model_loads() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        _one_line_error(_serve("--port", str(port)), f"port {port} on 127.0.0.1 is in use")


@pytest.mark.slow  # a real `wde serve` process
def test_ready_line_with_the_url_and_access_lines(tmp_path: Path) -> None:
    """Polled while it loads, /health answers 503 (or nothing yet) and the log stays quiet: one INFO line
    says the model is loading, no ERROR, no access line per probe."""
    with serve_process(tmp_path) as server:
        deadline = time.monotonic() + TIMEOUT
        ready = f"ready: serving sentence-transformers/all-MiniLM-L6-v2 at {server.url}"
        while ready not in server.log():
            assert server.process.poll() is None and time.monotonic() < deadline, server.log()
            with contextlib.suppress(httpx.TransportError):  # not listening yet
                assert httpx.get(f"{server.url}/health", timeout=5).status_code in (200, 503)
            time.sleep(0.02)
        assert (
            httpx.post(f"{server.url}/embed", json={"inputs": ["a", "b"]}, timeout=TIMEOUT).status_code == 200
        )
        assert httpx.post(f"{server.url}/embed", json={"inputs": []}, timeout=TIMEOUT).status_code == 400
        server.process.send_signal(signal.SIGTERM)
        assert server.wait() == 0, server.log()
        log = server.log()
    assert "Uvicorn running" not in log
    assert log.index(f"listening on {server.url}") < log.index("ready: serving")
    assert log.count("wde.access: POST /embed 200") == 1 and "inputs=2 tokens=6" in log
    assert log.count("wde.access: POST /embed 400") == 1 and "WARNING wde.access" in log
    assert " ERROR " not in log and "wde.access: GET /health" not in log
    assert [line for line in log.splitlines() if "loading" in line and " INFO " in line] == [
        next(line for line in log.splitlines() if f"listening on {server.url}; loading" in line)
    ]


@pytest.mark.slow  # two real `wde serve` processes
def test_two_servers_each_serve_the_batch_api_with_no_flags(tmp_path: Path) -> None:
    """Without --batch-dir each server takes its port's folder under ~/.cache/wde/batches."""
    home = tmp_path / "home"
    kernels = os.environ.get("WDE_KERNEL_CACHE") or os.path.expanduser("~/.cache/wde/kernels")
    env = {"HOME": str(home), "WDE_KERNEL_CACHE": kernels}  # the compiled attention kernel, not rebuilt
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with serve_process(tmp_path / "a", env=env) as first, serve_process(tmp_path / "b", env=env) as second:
        for server in (first, second):
            server.wait_healthy()
            files = httpx.get(f"{server.url}/v1/files", timeout=TIMEOUT)
            assert files.status_code == 200, files.text
            assert (home / ".cache" / "wde" / "batches" / f"port-{server.port}" / "lock").is_file()
            assert "the Batch API is off" not in server.log()
