"""Models by Hub id from a Hugging Face cache the test writes in huggingface_hub's layout (refs, snapshots,
blobs), with ``HF_HUB_OFFLINE=1``: the real huggingface_hub code resolves them, no network. Which files a
download takes (``needed_files``), local folders unchanged, and the one-line refusals."""

from __future__ import annotations

import json
import shutil
import socket
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import pytest

from server import cli
from tests.hub_cache import NEEDED_FILES, OTHER_FORMATS, hub_environment, save_hub_repo, write_hub_cache
from wde import LLM
from wde.engine_args import EngineArgs
from wde.model_folder.hub import (
    HubModelError,
    looks_like_repo_id,
    needed_files,
    read_token_file,
    resolve_model_path,
)

REPO_ID = "wde-tests/tiny-bert"
TEXTS = ["a Hub id loads the same model", "as its local folder", "x"]
# the same files through the same kernels: only float summation order could differ, and it does not
TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def repo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_hub_repo(tmp_path_factory.mktemp("hub-repo") / "tiny-bert")


@pytest.fixture
def offline_cache(tmp_path: Path, repo_dir: Path) -> Path:
    """The repo (only the files wde needs, as a download by wde leaves it) in a cache, HF_HUB_OFFLINE=1."""
    needed = tmp_path / "needed"
    for name in NEEDED_FILES:
        (needed / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(repo_dir / name, needed / name)
    home = tmp_path / "hf-home"
    write_hub_cache(home / "hub", REPO_ID, needed)
    with hub_environment(HF_HOME=str(home), HF_HUB_OFFLINE="1"):
        yield home / "hub"


def test_offline_cache_loads_the_same_model_as_the_local_folder(offline_cache: Path, repo_dir: Path) -> None:
    by_id = LLM(REPO_ID)
    by_folder = LLM(str(repo_dir))
    config = by_id.model_config
    assert Path(config.model).parent == offline_cache / "models--wde-tests--tiny-bert" / "snapshots"
    assert config.served_model_name == REPO_ID
    assert config.pooling.method == "mean" and config.pooling.normalize  # the modules came along
    got = np.stack([out.embedding for out in by_id.encode(TEXTS)])  # [num_texts, hidden_size]
    want = np.stack([out.embedding for out in by_folder.encode(TEXTS)])
    np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE)


def test_wde_embed_takes_a_hub_id(offline_cache: Path, repo_dir: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "out"
    argv = ["embed", str(texts), "--output", str(out), "--model", REPO_ID, "--no-progress"]
    assert cli.main(argv) == 0
    got = np.array(pq.read_table(str(out / "part-000000.parquet")).column("embedding").to_pylist())
    want = np.stack([output.embedding for output in LLM(str(repo_dir)).encode(TEXTS)])  # [num_texts, hidden]
    np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE)


def test_offline_with_nothing_cached_names_the_cache_and_the_variable(offline_cache: Path) -> None:
    with pytest.raises(
        HubModelError, match=r"wde-tests/absent .*not in the Hugging Face cache.*HF_HUB_OFFLINE=1"
    ):
        resolve_model_path("wde-tests/absent")


def test_offline_revision_that_is_not_cached_is_refused(offline_cache: Path) -> None:
    with pytest.raises(HubModelError, match=r"revision v2.*HF_HUB_OFFLINE=1"):
        resolve_model_path(REPO_ID, revision="v2")


def test_unreachable_hub_serves_the_cache_or_says_it_cannot_reach_it(tmp_path: Path, repo_dir: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    snapshot = write_hub_cache(tmp_path / "hub", REPO_ID, repo_dir)
    with hub_environment(HF_HUB_CACHE=str(tmp_path / "hub"), HF_ENDPOINT=closed):
        assert resolve_model_path(REPO_ID) == str(snapshot)  # the whole model is cached: served from it
        with pytest.raises(HubModelError, match=r"cannot reach the Hub .* for wde-tests/absent"):
            resolve_model_path("wde-tests/absent")


def test_offline_incomplete_snapshot_names_what_it_lacks(tmp_path: Path, repo_dir: Path) -> None:
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copy(repo_dir / "config.json", partial / "config.json")  # as `hf download ORG/NAME config.json`
    write_hub_cache(tmp_path / "hub", REPO_ID, partial)
    environment = hub_environment(HF_HUB_CACHE=str(tmp_path / "hub"), HF_HUB_OFFLINE="1")
    with environment, pytest.raises(HubModelError, match="lacks weights, tokenizer files; HF_HUB_OFFLINE=1"):
        EngineArgs(model=REPO_ID).create_engine_config()


def cached_remote_code_repo(
    tmp_path: Path, repo_id: str, architecture: str, code: dict[str, str]
) -> AbstractContextManager[None]:
    """A Hub cache holding only ``repo_id``'s config.json, which names ``architecture`` with remote ``code``
    (``auto_map``); the offline environment that reads it."""
    folder = tmp_path / repo_id.rsplit("/", 1)[-1]
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": [architecture], "auto_map": code}))
    write_hub_cache(tmp_path / "hub", repo_id, folder)
    return hub_environment(HF_HUB_CACHE=str(tmp_path / "hub"), HF_HUB_OFFLINE="1")


def test_remote_code_is_refused_naming_the_architecture(tmp_path: Path) -> None:
    """jina-embeddings-v2's JinaBertModel (ALiBi, remote code) is an architecture wde lacks."""
    code = {
        "AutoConfig": "jinaai/jina-bert-implementation--configuration_bert.JinaBertConfig",
        "AutoModel": "jinaai/jina-bert-implementation--modeling_bert.JinaBertModel",
    }
    environment = cached_remote_code_repo(tmp_path, "wde-tests/jina-v2", "JinaBertModel", code)
    with environment, pytest.raises(HubModelError, match="needs remote code for architecture JinaBertModel"):
        resolve_model_path("wde-tests/jina-v2")


def test_remote_code_of_an_architecture_wde_implements_is_not_refused(tmp_path: Path) -> None:
    """nomic-embed-text's config.json names remote code for NomicBertModel, which wde implements itself
    (wde/models/nomic_bert.py): past the remote-code check, resolving goes on to the weights (which this
    offline cache lacks, so it stops there, saying so)."""
    code = {
        "AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
        "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel",
    }
    environment = cached_remote_code_repo(tmp_path, "wde-tests/nomic", "NomicBertModel", code)
    with environment, pytest.raises(HubModelError, match="lacks weights") as refusal:
        resolve_model_path("wde-tests/nomic")
    assert "remote code" not in str(refusal.value)


def test_local_folders_work_unchanged(repo_dir: Path, tmp_path: Path) -> None:
    assert resolve_model_path(str(repo_dir)) == str(repo_dir.resolve())
    with pytest.raises(HubModelError, match=r"not a local directory with a config\.json, nor a Hub repo id"):
        resolve_model_path(str(tmp_path / "no-such-model"))
    with pytest.raises(HubModelError, match=r"local directory without a config\.json"):
        resolve_model_path(str(tmp_path))


def test_repo_ids_and_paths_are_told_apart() -> None:
    for name in ("sentence-transformers/all-MiniLM-L6-v2", "BAAI/bge-small-en-v1.5", "bert-base-uncased"):
        assert looks_like_repo_id(name), name
    for name in ("/models/minilm", "./minilm", "~/minilm", "a/b/c", "../minilm", "org/../x", "org--x/y"):
        assert not looks_like_repo_id(name), name


def test_needed_files_take_one_weight_format_and_no_exports(repo_dir: Path) -> None:
    repo_files = [*NEEDED_FILES, *OTHER_FORMATS]
    assert set(needed_files(repo_files, ["1_Pooling"])) == NEEDED_FILES
    # no safetensors at the root: the pytorch_model*.bin shards, still no exports
    shards = ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"]
    bin_only = [name for name in repo_files if name != "model.safetensors"] + shards
    assert {name for name in needed_files(bin_only, []) if name.endswith(".bin")} == {
        "pytorch_model.bin",
        *shards,
    }
    # a Dense module folder: its config and one weight format; BGE-M3's heads at the root
    dense = [
        "2_Dense/config.json",
        "2_Dense/model.safetensors",
        "2_Dense/pytorch_model.bin",
        "2_Dense/x.onnx",
    ]
    chosen = needed_files(
        [*NEEDED_FILES, *dense, "sparse_linear.pt", "colbert_linear.pt"], ["1_Pooling", "2_Dense"]
    )
    assert set(chosen) == NEEDED_FILES | {
        "2_Dense/config.json",
        "2_Dense/model.safetensors",
        "sparse_linear.pt",
        "colbert_linear.pt",
    }


def test_token_file_is_read_and_an_empty_one_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("hf_abc\n")
    assert read_token_file(str(tmp_path / "token")) == "hf_abc"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(HubModelError, match="is empty"):
        read_token_file(str(tmp_path / "empty"))
    with pytest.raises(HubModelError, match="cannot be read"):
        EngineArgs(model=REPO_ID, hf_token_file=str(tmp_path / "absent")).create_engine_config()
