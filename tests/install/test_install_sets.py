"""Each install set works with nothing more: ``pip install wde`` embeds and scores in Python and runs
``wde embed``; ``pip install 'wde[server]'`` (no dev extra) serves. A fresh venv holds exactly the set's
packages (tests/install/venv_view.py), so a module imported without its extra fails here, and the ones
installed but not needed (the references sentence-transformers pulls in with the bundled model) must stay
unimported."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.install.venv_view import build_venv, closure
from tests.server.serve_process import serve_process

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 300.0
TEXTS = ["Hello, world", "Embeddings map texts to vectors"]
# installed with the core (the bundled model's package requires sentence-transformers), never needed
UNNEEDED = ("transformers", "sentence_transformers", "scipy", "sklearn")
TOLERANCE = 1e-6  # max |difference| to this environment's LLM: the same torch on the same CPU

pytestmark = pytest.mark.slow  # venvs and subprocesses: ~30 s in all


def import_names(extras: frozenset[str]) -> set[str]:
    """The top-level modules of the distributions ``extras`` add to the core, as pyproject.toml says."""
    added = set(closure(REPO, extras)) - set(closure(REPO, frozenset()))
    names = set()
    for name in added:
        dist = closure(REPO, extras)[name]
        names |= {
            Path(str(file)).parts[0].removesuffix(".py")
            for file in dist.files or []
            if not str(file).startswith("..") and ".dist-info" not in str(file)
        }
    return {name.split(".")[0] for name in names if name.isidentifier()}


def imported(importtime_stderr: str) -> set[str]:
    """The top-level modules a ``python -X importtime`` run imported."""
    return {
        match.split(".")[0] for match in re.findall(r"^import time:.*\|\s+(\S+)$", importtime_stderr, re.M)
    }


def run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        [str(python), "-X", "importtime", *args],
        cwd=cwd,
        env={**env, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def core_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_venv(tmp_path_factory.mktemp("core") / "venv", frozenset(), REPO)


@pytest.fixture(scope="module")
def server_extras_modules() -> set[str]:
    names = import_names(frozenset({"server"}))
    assert {"zmq", "fastapi", "uvicorn", "msgspec", "orjson", "setproctitle"} <= names, names
    return names


def test_the_core_embeds_scores_and_reranks_without_the_extras(
    core_python: Path, server_extras_modules: set[str], default_llm, tmp_path: Path
) -> None:
    script = (
        "import json; from wde import LLM; llm = LLM(); "
        f"vectors = [o.embedding.tolist() for o in llm.encode({TEXTS!r})]; "
        f"scores = [o.score for o in llm.score({TEXTS[0]!r}, {TEXTS[1:]!r})]; "
        f"ranked = [r.index for r in llm.rerank({TEXTS[0]!r}, {TEXTS!r})]; "
        "print(json.dumps([vectors, scores, ranked]))"
    )
    result = run(core_python, "-c", script, cwd=tmp_path)
    vectors, scores, ranked = json.loads(result.stdout.strip().splitlines()[-1])
    expected = np.stack([output.embedding for output in default_llm.encode(TEXTS)])
    np.testing.assert_allclose(np.array(vectors), expected, atol=TOLERANCE, rtol=0)
    assert scores == pytest.approx([float(expected[0] @ expected[1])], abs=TOLERANCE)
    assert ranked == [0, 1]
    modules = imported(result.stderr)
    assert "wde" in modules and "torch" in modules
    assert not modules & server_extras_modules, sorted(modules & server_extras_modules)
    assert not modules & set(UNNEEDED), sorted(modules & set(UNNEEDED))


def test_the_core_runs_wde_embed(
    core_python: Path, server_extras_modules: set[str], default_llm, tmp_path: Path
):
    records = tmp_path / "texts.jsonl"
    records.write_text("".join(json.dumps({"id": i, "text": text}) + "\n" for i, text in enumerate(TEXTS)))
    wde = core_python.with_name("wde")
    result = run(
        core_python, str(wde), "embed", str(records), "--output", "out", "--no-progress", cwd=tmp_path
    )
    table = pq.read_table(sorted((tmp_path / "out").rglob("*.parquet")))
    assert table.column("id").to_pylist() == [0, 1]
    expected = np.stack([output.embedding for output in default_llm.encode(TEXTS)])
    np.testing.assert_allclose(
        np.array(table.column("embedding").to_pylist()), expected, atol=TOLERANCE, rtol=0
    )
    modules = imported(result.stderr)
    assert not modules & server_extras_modules, sorted(modules & server_extras_modules)
    assert not modules & set(UNNEEDED), sorted(modules & set(UNNEEDED))


def test_the_core_refuses_what_needs_an_extra_in_one_line(core_python: Path, tmp_path: Path) -> None:
    wde = core_python.with_name("wde")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    serve = subprocess.run(
        [str(wde), "serve"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert serve.returncode == 2, serve.stderr
    (line,) = serve.stderr.strip().splitlines()  # the first of the server's packages it looked for
    assert re.fullmatch(
        r"wde serve: error: wde serve needs (fastapi|uvicorn), which is not installed: "
        r"pip install 'wde\[server\]'",
        line,
    ), line
    script = "from wde import LLM; LLM(tokenizer_processes=1)"
    library = subprocess.run(
        [str(core_python), "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert library.returncode == 1
    assert library.stderr.strip().splitlines()[-1] == (
        "wde.extras.MissingExtraError: tokenizer_processes > 0 (--tokenizer-processes) needs zmq, which is "
        "not installed: pip install 'wde[server]'"
    )


def test_the_server_set_serves_without_dev(default_llm, tmp_path: Path) -> None:
    python = build_venv(tmp_path / "venv", frozenset({"server"}), REPO)
    with serve_process(
        tmp_path, command=[str(python.with_name("wde"))], env={"HF_HUB_OFFLINE": "1"}
    ) as server:
        server.wait_healthy(TIMEOUT)
        answer = httpx.post(f"{server.url}/embed", json={"inputs": TEXTS}, timeout=60)
        assert answer.status_code == 200, answer.text
        expected = np.stack([output.embedding for output in default_llm.encode(TEXTS)])
        np.testing.assert_allclose(np.array(answer.json()), expected, atol=TOLERANCE, rtol=0)
        server.process.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0, server.log()
