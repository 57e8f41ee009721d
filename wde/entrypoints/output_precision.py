"""Quantized embedding outputs (``precision``: float32, int8, uint8, binary, ubinary), computed as
sentence-transformers' ``quantize_embeddings`` does, so vector databases can take them directly.

int8 / uint8 map each dimension's calibration range [min, max] onto 256 buckets: ``floor((x - min) / step)``
clipped to [0, 255], ``step = (max - min) / 255`` (1 where max == min), minus 128 for int8. The ranges come
from the engine's calibration set (``--calibration-file``: representative texts), embedded once per set of
output-shaping options (normalize, dimensions, prompt, truncation) and kept. binary / ubinary keep the sign
bits, 8 dimensions per byte (``np.packbits(x > 0)``; binary minus 128 as int8): no calibration.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np

from wde.config import PRECISION_NAMES
from wde.engine.errors import OutputNotSupportedError
from wde.inputs import PoolingParams

CALIBRATED = ("int8", "uint8")
MAX_CALIBRATION_TEXTS = 10_000


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


def quantization_ranges(calibration: np.ndarray) -> np.ndarray:
    """``[2, dim]``: each dimension's min and max over the calibration embeddings ``[num_texts, dim]``."""
    return np.vstack((calibration.min(axis=0), calibration.max(axis=0))).astype(np.float32)


def quantize(embeddings: np.ndarray, precision: str, ranges: np.ndarray | None = None) -> np.ndarray:
    """``[num_texts, dim]`` float32 -> the precision's array (``[num_texts, ceil(dim / 8)]`` when binary)."""
    if precision == "float32":
        return embeddings.astype(np.float32)
    if precision in CALIBRATED:
        if ranges is None:
            raise ValueError(f"{precision} output needs calibration ranges")
        starts = ranges[0, :]
        steps = (ranges[1, :] - starts) / 255
        steps = np.where(steps == 0, 1, steps)
        buckets = np.clip(np.floor((embeddings - starts) / steps), 0, 255)
        return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)
    if precision == "binary":
        return (np.packbits(embeddings > 0, axis=-1) - 128).astype(np.int8)
    if precision == "ubinary":
        return np.packbits(embeddings > 0, axis=-1)
    raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISION_NAMES)}")


class Calibration:
    """The calibration texts of one engine and the int8 / uint8 ranges computed from them, one per set of
    output-shaping options (the float request's ``PoolingParams``)."""

    def __init__(self, texts: list[str] | None) -> None:
        self.texts = texts
        self._ranges: dict[PoolingParams, np.ndarray] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | None) -> Calibration:
        return cls(load_calibration_texts(path) if path else None)

    def check(self, precision: str | None) -> None:
        """Raise before anything runs when the precision needs calibration this engine has not got."""
        if precision in CALIBRATED and not self.texts:
            raise OutputNotSupportedError(
                f"{precision} output needs calibration ranges, and this engine has no calibration texts: "
                "start it with --calibration-file FILE (a .jsonl or .txt of ~1,000 texts like the ones you "
                "embed), or ask for precision binary / ubinary / float32"
            )

    def ranges(self, params: PoolingParams) -> np.ndarray | None:
        with self._lock:
            return self._ranges.get(params)

    def store(self, params: PoolingParams, calibration: np.ndarray) -> np.ndarray:
        ranges = quantization_ranges(calibration)
        with self._lock:
            self._ranges[params] = ranges
        return ranges
