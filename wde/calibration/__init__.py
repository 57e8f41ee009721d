"""Calibration texts: the set bundled in this folder (``sentences.txt``, its README says where it comes from)
and the reader of a user's ``--calibration-file``. They set the ranges of int8 / uint8 outputs
(``wde/entrypoints/output_precision.py``) and, the first few bundled ones, the smoothing of int8 weights at
load (``wde/worker/calibration_pass.py``)."""

from __future__ import annotations

import json
from pathlib import Path

MAX_CALIBRATION_TEXTS = 10_000
BUNDLED_TEXTS = Path(__file__).resolve().parent / "sentences.txt"


def load_calibration_texts(path: str | Path) -> list[str]:
    """Texts of a ``.jsonl`` file (its ``"text"`` fields) or of a text file (one per non-empty line)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(
            f"calibration file {str(path)!r} does not exist; pass a .jsonl or .txt file of texts"
        )
    with path.open(encoding="utf-8") as f:
        if path.suffix == ".jsonl":
            texts = [json.loads(line)["text"] for line in f if line.strip()]
        else:
            texts = [line.rstrip("\n") for line in f if line.strip()]
    if len(texts) < 2:
        raise ValueError(
            f"calibration file {str(path)!r} has {len(texts)} texts; int8 ranges need many (~1,000)"
        )
    return texts[:MAX_CALIBRATION_TEXTS]
