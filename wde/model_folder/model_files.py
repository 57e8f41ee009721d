"""What a model directory must hold before anything loads: weights and tokenizer files.

Checked when the model directory is read (``read_model_info``, for the engine config), so ``wde serve``
refuses a folder in one line before it binds a port or loads a tensor, and ``LLM(path)`` fails before the
model is built. Plain file checks: no torch, no tokenizer import (a safetensors checkpoint's tensor names come
from its header, for what a family reads before load: Jina v3's LoRA task adapters).
"""

from __future__ import annotations

import json
from pathlib import Path

WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
# A fast tokenizer, or the slow tokenizer files transformers converts to one (WordPiece, SentencePiece,
# byte-level BPE).
FAST_TOKENIZER_FILE = "tokenizer.json"
SLOW_TOKENIZER_FILES = (
    ("vocab.txt",),
    ("sentencepiece.bpe.model",),
    ("spiece.model",),
    ("tokenizer.model",),
    ("spm.model",),
    ("vocab.json", "merges.txt"),
)


class ModelFilesError(ValueError):
    """The model directory lacks files wde needs; the message names them."""


def weight_files(model_dir: str | Path) -> list[Path]:
    """The checkpoint's files: every ``*.safetensors``, else every ``pytorch_model*.bin``."""
    model_dir = Path(model_dir)
    for pattern in WEIGHT_PATTERNS:
        files = sorted(model_dir.glob(pattern))
        if files:
            return files
    return []


def has_tokenizer_files(tokenizer_dir: str | Path) -> bool:
    tokenizer_dir = Path(tokenizer_dir)
    if (tokenizer_dir / FAST_TOKENIZER_FILE).is_file():
        return True
    return any(all((tokenizer_dir / name).is_file() for name in group) for group in SLOW_TOKENIZER_FILES)


def check_model_files(model_dir: str | Path, tokenizer_dir: str | Path) -> None:
    """Raise ``ModelFilesError`` naming what is missing from ``model_dir`` / ``tokenizer_dir``."""
    if not weight_files(model_dir):
        raise ModelFilesError(
            f"{model_dir} has no weights (model.safetensors or pytorch_model.bin); "
            "download the whole model folder, not only its config.json"
        )
    if not has_tokenizer_files(tokenizer_dir):
        slow = ", ".join(" + ".join(group) for group in SLOW_TOKENIZER_FILES)
        raise ModelFilesError(
            f"{tokenizer_dir} has no tokenizer files ({FAST_TOKENIZER_FILE}, or {slow}); copy them from the "
            "model's repository, or pass --tokenizer DIR (tokenizer= in Python) naming a folder that has them"
        )


def checkpoint_tensor_names(model_dir: str | Path) -> list[str] | None:
    """The tensor names of a safetensors checkpoint, read from each file's JSON header (no tensor is read);
    None for ``pytorch_model*.bin`` (its names are known only once it is loaded)."""
    files = weight_files(model_dir)
    if not files or files[0].suffix != ".safetensors":
        return None
    names: list[str] = []
    for path in files:
        with open(path, "rb") as f:
            header_size = int.from_bytes(f.read(8), "little")  # the format: u64 length, then the JSON header
            header = json.loads(f.read(header_size))
        names.extend(name for name in header if name != "__metadata__")
    return names
