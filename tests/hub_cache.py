"""A Hugging Face Hub cache written by the tests in huggingface_hub's own layout, the environment that
points huggingface_hub at it, and a tiny repository folder with files wde must not fetch beside its own.

    <cache>/models--ORG--NAME/refs/<revision>           the commit hash of the revision
    <cache>/models--ORG--NAME/blobs/<sha256>            each file's bytes
    <cache>/models--ORG--NAME/snapshots/<commit>/<path> a relative symlink to its blob

huggingface_hub reads ``HF_HUB_CACHE``, ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` into
``huggingface_hub.constants`` when it is imported; ``hub_environment`` sets them and reloads that module
(and reloads it again on the way out), so that the real client code runs against the test's cache and Hub.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# the variables huggingface_hub reads at import time, cleared so that the machine's own do not leak in
HUB_VARIABLES = (
    "HF_HOME",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_ENDPOINT",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_HUB_DISABLE_XET",
)


def model_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its ``/``-separated relative path."""
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def folder_commit(folder: Path) -> str:
    """A 40-hex commit hash of the folder's paths and bytes (the same folder gives the same commit)."""
    digest = hashlib.sha1()
    for name, data in model_files(folder).items():
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def repo_folder(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def write_hub_cache(cache: Path, repo_id: str, folder: Path, revision: str = "main") -> Path:
    """Put ``folder`` into ``cache`` as revision ``revision`` of ``repo_id``; returns the snapshot folder."""
    storage = repo_folder(cache, repo_id)
    commit = folder_commit(folder)
    snapshot = storage / "snapshots" / commit
    for name, data in model_files(folder).items():
        blob = storage / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    (storage / "refs" / revision).write_text(commit)
    return snapshot


@contextmanager
def hub_environment(**variables: str) -> Iterator[None]:
    """``HF_*`` variables set (the others of ``HUB_VARIABLES`` unset) and huggingface_hub's constants
    re-read from them, for the block; the previous environment and constants afterwards."""
    import huggingface_hub.constants

    saved = {name: os.environ.get(name) for name in {*HUB_VARIABLES, *variables}}
    try:
        for name in HUB_VARIABLES:
            os.environ.pop(name, None)
        os.environ.update(variables)
        importlib.reload(huggingface_hub.constants)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        importlib.reload(huggingface_hub.constants)


# what wde reads of save_hub_repo's folder (hub.needed_files); the rest of the folder it must not fetch
NEEDED_FILES = {
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "modules.json",
    "1_Pooling/config.json",
}
OTHER_FORMATS = {
    "pytorch_model.bin": b"the same weights in the other format",
    "tf_model.h5": b"tf",
    "flax_model.msgpack": b"flax",
    "onnx/model.onnx": b"onnx",
    "onnx/model.safetensors": b"an exporter's copy",
    "openvino/openvino_model.xml": b"<xml/>",
    "openvino/openvino_model.bin": b"openvino",
    "README.md": b"# a model card",
    ".gitattributes": b"*.safetensors filter=lfs",
}


def save_hub_repo(path: Path, seed: int = 0) -> Path:
    """A tiny random sentence-transformers BERT (mean pooling, Normalize) as a Hub repository holds it:
    ``NEEDED_FILES`` plus exports in other formats, a model card and an ``.gitattributes``."""
    from tests.tiny_models import HIDDEN_SIZE, save_tiny_bert

    save_tiny_bert(path, seed=seed)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (path / "modules.json").write_text(json.dumps(modules))
    pooling = {"word_embedding_dimension": HIDDEN_SIZE, "pooling_mode_mean_tokens": True}
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    for name, data in OTHER_FORMATS.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(data)
    return path
