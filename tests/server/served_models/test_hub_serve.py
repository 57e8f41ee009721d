"""Models by Hub id through a Hub endpoint on 127.0.0.1 (tests/local_hub.py) with ``HF_ENDPOINT`` pointing
at it: huggingface_hub really downloads (revision, 401 for a gated repo, 404), and wde takes exactly the
files it reads, once. The slow tests run real ``wde serve`` processes on the bundled all-MiniLM-L6-v2 as
``sentence-transformers/all-MiniLM-L6-v2``: from a test-made cache with ``HF_HUB_OFFLINE=1``, and from the
local endpoint twice (the second start downloads nothing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest

from server import cli
from server.served_models.models_file import read_models_file
from tests.hub_cache import (
    NEEDED_FILES,
    OTHER_FORMATS,
    folder_commit,
    hub_environment,
    model_files,
    save_hub_repo,
    write_hub_cache,
)
from tests.local_hub import HubRepo, LocalHub, local_hub
from tests.server.conftest import asgi_client
from tests.server.serve_process import TIMEOUT, serve_process, wde_command
from wde import LLM
from wde.engine_args import EngineArgs, default_model_path
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.model_folder.hub import HubModelError, resolve_model_path

REPO_ID = "wde-tests/tiny-bert"
GATED_ID = "wde-tests/gated-bert"
TOKEN = "hf_test_token_of_an_account_with_access"
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
# the bundled folder's files that wde reads (not README.md, data_config.json)
MINILM_FILES = {
    "config.json",
    "config_sentence_transformers.json",
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
}
TEXTS = ["models by Hub id", "the same numbers as the bundled folder"]
TOLERANCE = 1e-5  # the same weights in another process: float32 round-off only


@pytest.fixture(scope="module")
def repo_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hub-repos")
    return {"main": save_hub_repo(root / "main", seed=0), "v2": save_hub_repo(root / "v2", seed=1)}


@pytest.fixture
def hub(repo_dirs: dict[str, Path], tmp_path: Path) -> Iterator[LocalHub]:
    repos = {
        REPO_ID: HubRepo(dict(repo_dirs)),
        GATED_ID: HubRepo({"main": repo_dirs["main"]}, gated_token=TOKEN),
    }
    with (
        local_hub(repos) as endpoint,
        hub_environment(HF_ENDPOINT=endpoint.url, HF_HOME=str(tmp_path / "hf")),
    ):
        yield endpoint


def test_downloads_exactly_the_needed_files_once(hub: LocalHub, repo_dirs: dict[str, Path]) -> None:
    snapshot = Path(resolve_model_path(REPO_ID))
    assert sorted(hub.downloads()) == sorted(
        NEEDED_FILES
    )  # each once; no exports, no .bin beside safetensors
    assert set(model_files(snapshot)) == NEEDED_FILES
    source = model_files(repo_dirs["main"])
    assert all(data == source[name] for name, data in model_files(snapshot).items())
    # a second start (and the engine config a server makes) fetches nothing: one revision look-up each
    num_requests = len(hub.requests)
    assert resolve_model_path(REPO_ID) == str(snapshot)
    config = EngineArgs(model=REPO_ID).create_engine_config().model_config
    assert config.model == str(snapshot) and config.served_model_name == REPO_ID
    later = [path for method, path in hub.requests[num_requests:] if REPO_ID in path]
    assert later == [f"/api/models/{REPO_ID}/revision/main"] * 2


def test_revision_selects_the_tagged_commit(
    hub: LocalHub, repo_dirs: dict[str, Path], tmp_path: Path
) -> None:
    snapshot = Path(EngineArgs(model=REPO_ID, revision="v2").create_engine_config().model_config.model)
    assert snapshot.name == folder_commit(repo_dirs["v2"]) != folder_commit(repo_dirs["main"])
    assert (snapshot / "model.safetensors").read_bytes() == (
        repo_dirs["v2"] / "model.safetensors"
    ).read_bytes()
    # a --model-config entry names its own revision
    models_file = tmp_path / "models.yaml"
    models_file.write_text(f"models:\n  - model: {REPO_ID}\n    revision: main\n")
    (entry,) = read_models_file(str(models_file), EngineArgs())
    assert Path(entry.create_engine_config().model_config.model).name == folder_commit(repo_dirs["main"])


@pytest.mark.anyio
async def test_info_reports_the_served_commit(hub: LocalHub, repo_dirs: dict[str, Path]) -> None:
    """TEI's ``model_sha``: the Hub commit the revision resolved to; null for a local folder."""
    for model, revision, want in (
        (REPO_ID, "v2", folder_commit(repo_dirs["v2"])),
        (REPO_ID, None, folder_commit(repo_dirs["main"])),
        (str(repo_dirs["main"]), None, None),
    ):
        engine = AsyncLLMEngine(EngineArgs(model=model, revision=revision))
        engine.start()
        try:
            engine.wait_until_ready(timeout=120)
            async with asgi_client(engine) as (client, _):
                info = (await client.get("/info")).json()
        finally:
            engine.shutdown(timeout=60)
        assert info["model_sha"] == want and info["model_id"] == model


def test_embed_resolves_a_hub_model_once(hub: LocalHub, tmp_path: Path) -> None:
    """``wde embed --model ORG/NAME`` of a cached model: one revision look-up, the model loaded from that
    snapshot."""
    snapshot = resolve_model_path(REPO_ID)  # downloaded: later starts only look the revision up
    source = tmp_path / "texts.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": text}) + "\n" for i, text in enumerate(TEXTS)))
    out = tmp_path / "out"
    num_requests = len(hub.requests)
    assert cli.main(["embed", str(source), "-o", str(out), "--model", REPO_ID, "--no-progress"]) == 0
    assert hub.requests[num_requests:] == [("GET", f"/api/models/{REPO_ID}/revision/main")]
    want = np.stack([o.embedding for o in LLM(snapshot).encode(TEXTS)])
    got = np.stack(pq.read_table(out).column("embedding").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE)


def test_gated_repo_names_hf_token_and_opens_with_the_token(hub: LocalHub, tmp_path: Path) -> None:
    with pytest.raises(HubModelError, match=r"gated.*set HF_TOKEN"):
        resolve_model_path(GATED_ID)
    with pytest.raises(HubModelError, match=r"token \(HF_TOKEN or --hf-token-file\) has no access"):
        resolve_model_path(GATED_ID, token="hf_another_accounts_token")
    assert hub.downloads() == []
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    config = EngineArgs(model=GATED_ID, hf_token_file=str(token_file)).create_engine_config().model_config
    assert set(model_files(Path(config.model))) == NEEDED_FILES


def test_gated_serve_exits_2_with_one_line_naming_hf_token(
    hub: LocalHub, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["serve", GATED_ID]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wde serve: error: ") and err.count("\n") == 1 and "HF_TOKEN" in err


def test_unknown_repo_and_revision_are_not_found(hub: LocalHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "wde-tests/no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "has no repository wde-tests/no-such-model (not found" in err and err.count("\n") == 1
    with pytest.raises(HubModelError, match=r"has no revision .v9. \(not found\)"):
        resolve_model_path(REPO_ID, revision="v9")
    assert hub.downloads() == []


def test_a_failed_start_shows_only_wdes_line(hub: LocalHub, tmp_path: Path) -> None:
    """In a process of its own (the log configured as `wde serve` does): no HTTP-client line per Hub
    request above the error at the default level; ``--log-level debug`` shows them."""
    for log_level, want_lines in (("info", 1), ("debug", None)):
        result = subprocess.run(
            [*wde_command(), "serve", "wde-tests/no-such-model", "--log-level", log_level],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env={**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf")},
        )
        assert result.returncode == 2 and "wde serve: error: model 'wde-tests/no-such-model'" in result.stderr
        if want_lines is not None:
            assert result.stderr.startswith("wde serve: error: ") and result.stderr.count("\n") == want_lines
        else:
            assert "HTTP Request: GET" in result.stderr


def test_model_id_and_its_environment_variable_are_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    args = cli.build_parser().parse_args(["serve", "--model-id", REPO_ID, "--revision", "v2"])
    assert [(each.model, each.revision) for each in cli._served_engine_args(args)] == [(REPO_ID, "v2")]
    monkeypatch.setenv("MODEL_ID", GATED_ID)
    assert [each.model for each in cli._served_engine_args(cli.build_parser().parse_args(["serve"]))] == [
        GATED_ID
    ]
    args = cli.build_parser().parse_args(["serve", REPO_ID])  # given models win over MODEL_ID
    assert [each.model for each in cli._served_engine_args(args)] == [REPO_ID]
    args = cli.build_parser().parse_args(["embed", "in.jsonl", "-o", "out", "--model-id", REPO_ID])
    assert args.model == REPO_ID


@pytest.fixture(scope="module")
def minilm_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled all-MiniLM-L6-v2 folder with other formats beside it, as its Hub repository has."""
    folder = tmp_path_factory.mktemp("minilm") / "repo"
    shutil.copytree(default_model_path(), folder)
    for name, data in OTHER_FORMATS.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def served_embeddings(url: str) -> np.ndarray:
    response = httpx.post(f"{url}/embed", json={"inputs": TEXTS}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return np.array(response.json(), dtype=np.float32)  # [num_texts, 384]


@pytest.mark.slow  # a real `wde serve` process
def test_serve_hub_id_offline_from_a_test_made_cache(minilm_repo: Path, tmp_path: Path, default_llm) -> None:
    write_hub_cache(tmp_path / "hf" / "hub", MINILM_ID, minilm_repo)
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    with serve_process(tmp_path, MINILM_ID, env=env) as server:
        server.wait_healthy()
        assert httpx.get(f"{server.url}/info", timeout=TIMEOUT).json()["model_id"] == MINILM_ID
        want = np.stack([out.embedding for out in default_llm.encode(TEXTS)])
        np.testing.assert_allclose(served_embeddings(server.url), want, rtol=0, atol=TOLERANCE)


@pytest.mark.slow  # two real `wde serve` processes
def test_serve_downloads_once_and_a_second_start_downloads_nothing(minilm_repo: Path, tmp_path: Path) -> None:
    with local_hub({MINILM_ID: HubRepo({"main": minilm_repo})}) as endpoint:
        env = {
            "HF_HOME": str(tmp_path / "hf"),
            "HF_ENDPOINT": endpoint.url,
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
        embeddings = []
        for start in ("first", "second"):
            (tmp_path / start).mkdir()
            with serve_process(tmp_path / start, "--model-id", MINILM_ID, env=env) as server:
                server.wait_healthy()
                embeddings.append(served_embeddings(server.url))
            if start == "first":
                assert sorted(endpoint.downloads()) == sorted(MINILM_FILES)
        assert sorted(endpoint.downloads()) == sorted(MINILM_FILES)  # the second start fetched nothing
        # the same weights; each start times its float32 GEMMs (packed_linear.py) and may keep another one
        np.testing.assert_allclose(embeddings[0], embeddings[1], rtol=0, atol=TOLERANCE)
