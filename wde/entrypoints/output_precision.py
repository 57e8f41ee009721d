"""Quantized embedding outputs (``precision``: float32, int8, uint8, binary, ubinary), computed as
sentence-transformers' ``quantize_embeddings`` does, so vector databases can take them directly.

int8 / uint8 map each dimension's calibration range [min, max] onto 256 buckets: ``floor((x - min) / step)``
clipped to [0, 255], ``step = (max - min) / 255`` (1 where max == min), minus 128 for int8. The ranges come
from the engine's calibration set (``--calibration-file``: representative texts; else the sentences bundled
in wde/calibration/, whose README says where they come from), embedded once per set of options that shape a
dense vector (``calibration_options``: normalization, dimensions, prompt, cut) and kept: a text's codes never
depend on the request or the batch it came in. binary / ubinary keep the sign bits, 8 dimensions per byte
(``np.packbits(x > 0)``; binary minus 128 as int8): no calibration.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from wde.calibration import BUNDLED_TEXTS, load_calibration_texts
from wde.config import PRECISION_NAMES, ModelConfig
from wde.inputs import PoolingParams

CALIBRATED = ("int8", "uint8")
BUNDLED = "bundled"  # the source of the calibration set shipped with wde


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


def calibration_options(params: PoolingParams, model_config: ModelConfig) -> PoolingParams:
    """The options the calibration texts are embedded with for a request of ``params`` (float32: no
    ``precision``), which also key their ranges: what shapes a dense vector, with the engine's defaults
    filled in (normalization; the prompt the side or the model's default picks, where no task adapter or
    late-interaction side depends on the names), so that the doors' differing spellings of the same
    options (/embed's ``normalize: true``, Cohere's ``input_type``) share ranges and codes. Calibration
    texts over the length are cut, never refused or windowed."""
    prompt_name, input_type = params.prompt_name, params.input_type
    if model_config.task_adapters is None and model_config.multi_vector is None:
        side_prompt = input_type if input_type in model_config.prompts else None
        prompt_name = prompt_name or side_prompt or model_config.default_prompt_name
        input_type = None
    return PoolingParams(
        normalize=model_config.pooling.normalize if params.normalize is None else params.normalize,
        dimensions=params.dimensions,
        truncate=True,
        prompt_name=prompt_name,
        output="dense",
        input_type=input_type,
        truncation_direction=params.truncation_direction,
        max_input_tokens=params.max_input_tokens,
    )


def default_option_sets(model_config: ModelConfig) -> list[PoolingParams]:
    """The calibration options of the dense requests that set no option, on every door: the model's own
    normalization or normalized (TEI's /embed), with no side or either side (Cohere's ``search_query`` /
    ``search_document``, /v1/embeddings' ``input_type``), each distinct set once; none for a model without
    dense output (a cross-encoder, SPLADE)."""
    if not model_config.has_dense_output:
        return []
    requests = [
        PoolingParams(normalize=normalize, input_type=side)
        for normalize in (None, True)
        for side in (None, "query", "document")
    ]
    return list(dict.fromkeys(calibration_options(params, model_config) for params in requests))


RangesListener = Callable[[PoolingParams, np.ndarray], None]


class Calibration:
    """The calibration texts of one engine (``source``: ``--calibration-file``'s path, or ``"bundled"``)
    and the int8 / uint8 ranges computed from them, one per set of ``calibration_options``. ``on_store``
    hears each set computed here (the server's processes share them: ``server/engine_link``); ranges
    computed elsewhere are ``keep``-t without telling it."""

    def __init__(self, texts: list[str], source: str) -> None:
        if not texts:
            raise ValueError(f"calibration set {source!r} has no texts; int8 ranges need many (~1,000)")
        self.texts = texts
        self.source = source
        self._ranges: dict[PoolingParams, np.ndarray] = {}
        self._lock = threading.Lock()
        self.on_store: RangesListener | None = None

    @classmethod
    def from_file(cls, path: str | None) -> Calibration:
        """The texts of ``--calibration-file``; None: the bundled set."""
        return cls(load_calibration_texts(path), str(path)) if path else cls.bundled()

    @classmethod
    def bundled(cls) -> Calibration:
        """The sentences shipped in wde/calibration/ (English prose of the Python documentation, PSF-2.0)."""
        return cls(load_calibration_texts(BUNDLED_TEXTS), BUNDLED)

    def describe(self) -> dict[str, str | int]:
        """What /info shows: where the texts come from and how many there are."""
        return {"source": self.source, "num_texts": len(self.texts)}

    def ranges(self, options: PoolingParams) -> np.ndarray | None:
        """The ranges kept for ``options`` (what ``calibration_options`` answers); None before any."""
        with self._lock:
            return self._ranges.get(options)

    def store(self, options: PoolingParams, calibration: np.ndarray) -> np.ndarray:
        """Keep the ranges of the texts' embeddings ``[num_texts, dim]`` for ``options``; returns them."""
        ranges = quantization_ranges(calibration)
        self.keep(options, ranges)
        if self.on_store is not None:
            self.on_store(options, ranges)
        return ranges

    def keep(self, options: PoolingParams, ranges: np.ndarray) -> None:
        """Keep ``ranges`` ``[2, dim]`` computed elsewhere for ``options`` (same texts, same model)."""
        with self._lock:
            self._ranges[options] = ranges

    def kept(self) -> list[tuple[PoolingParams, np.ndarray]]:
        """Every option set's ranges kept so far."""
        with self._lock:
            return list(self._ranges.items())
