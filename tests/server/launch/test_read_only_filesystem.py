"""``wde serve`` on a read-only filesystem, as a container with ``--read-only`` (or Kubernetes'
``readOnlyRootFilesystem``) runs it: a --batch-dir that cannot be written turns the Batch API off (one
WARNING naming --batch-dir, its routes answer 503 naming it) and nothing else; with a read-only HOME and no
flag at all the server still serves /embed; and a start-up that fails after the engine started exits with
one error line and a non-zero code, never by a signal."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from server.app import create_app
from server.settings import ServerSettings
from tests.server.failing_lifespan import FAILURE
from tests.server.serve_process import REPO, TIMEOUT, free_port, serve_process, wde_command
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

BATCH_ROUTES = (("GET", "/v1/batches"), ("GET", "/v1/files"), ("POST", "/v1/batches/batch_x/cancel"))
# what a read-only HOME must not be rescued by: every cache folder wde would otherwise write to
CACHE_VARIABLES = ("XDG_CACHE_HOME", "WDE_BATCH_DIR", "WDE_KERNEL_CACHE")


def assert_batch_dir_503(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "batch_dir_unwritable" and "--batch-dir" in error["message"], error
    assert "retry-after" not in answer.headers  # retrying cannot help: the folder stays unwritable


@pytest.mark.anyio
async def test_an_unwritable_batch_dir_turns_only_the_batch_api_off(
    async_engine: AsyncLLMEngine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"  # a folder under a file cannot be made, whoever runs the test (root too)
    blocker.write_text("")
    app = create_app(async_engine, ServerSettings(batch_dir=str(blocker / "batches")))
    with caplog.at_level(logging.WARNING, logger="wde.server.batches"):
        await app.state.batches.start()  # what the lifespan runs: it must not raise
    try:
        warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
        assert len(warnings) == 1 and "--batch-dir" in warnings[0], warnings
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://wde.test", timeout=60) as client:
            for method, path in BATCH_ROUTES:
                assert_batch_dir_503(await client.request(method, path))
            embedded = await client.post("/embed", json={"inputs": ["still served"]})
            assert embedded.status_code == 200 and len(embedded.json()[0]) == 384
    finally:
        await app.state.batches.stop()
        app.state.wde.detach()


def read_only_home(home: Path) -> list[str]:
    """The command prefix that runs a command with ``home`` read-only and no cache variable set. Root
    writes through permission bits, so as root the folder is bind-mounted read-only in a private mount
    namespace (``unshare --mount`` without --fork: the process becomes the command itself)."""
    unset = [arg for name in CACHE_VARIABLES for arg in ("-u", name)]
    if os.geteuid() != 0:
        home.chmod(0o555)
        return ["env", *unset]
    if shutil.which("unshare") is None or subprocess.run(["unshare", "--mount", "true"]).returncode != 0:
        pytest.skip("running as root without mount namespaces (unshare): no read-only folder can be made")
    remount = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    return ["unshare", "--mount", "sh", "-c", remount, str(home), "env", *unset]


@pytest.mark.slow  # a real `wde serve` process
def test_a_read_only_home_serves_embed_and_answers_batch_routes_503(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    command = [*read_only_home(home), *wde_command()]
    with serve_process(tmp_path, command=command, env={"HOME": str(home)}) as server:
        server.wait_healthy()
        embedded = httpx.post(f"{server.url}/embed", json={"inputs": ["a", "b"]}, timeout=TIMEOUT)
        assert embedded.status_code == 200 and len(embedded.json()) == 2
        for method, path in BATCH_ROUTES:
            assert_batch_dir_503(httpx.request(method, f"{server.url}{path}", timeout=TIMEOUT))
        server.process.send_signal(signal.SIGTERM)
        assert server.wait() == 0, server.log()
    log = server.log()
    batch_warnings = [line for line in log.splitlines() if " WARNING " in line and "--batch-dir" in line]
    assert len(batch_warnings) == 1, log
    assert "Traceback" not in log and not any(home.iterdir())


@pytest.mark.slow  # a real `wde serve` process (about 10-25 s on 2 cores)
def test_a_lifespan_failure_after_the_engine_started_exits_with_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.server.failing_lifespan", "serve", "--port", str(free_port())],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "WDE_BATCH_DIR": str(tmp_path / "batches")},
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output  # negative: killed by a signal (SIGABRT: a thread left running)
    assert "loading the bundled model" in output  # the engine had started: its thread was stopped
    error_lines = [
        line
        for line in output.splitlines()
        if line.startswith("wde serve: error:") or " ERROR " in line or " CRITICAL " in line
    ]
    assert error_lines == [f"wde serve: error: the server did not start: RuntimeError: {FAILURE}"], output
    assert "Traceback" not in output and "terminate called" not in output
