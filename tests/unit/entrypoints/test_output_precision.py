"""Output precision: int8 / uint8 / binary / ubinary equal sentence-transformers' quantize_embeddings on the
same embeddings and ranges (exactly), calibration files, and the refusal without calibration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sentence_transformers.quantization import quantize_embeddings

from wde.engine.errors import OutputNotSupportedError
from wde.entrypoints.output_precision import (
    Calibration,
    load_calibration_texts,
    quantization_ranges,
    quantize,
)
from wde.inputs import PoolingParams

RNG = np.random.default_rng(0)
EMBEDDINGS = RNG.standard_normal((20, 24)).astype(np.float32)  # [num_texts, dim]
CALIBRATION = RNG.standard_normal((200, 24)).astype(np.float32)


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_equal_to_sentence_transformers(precision: str) -> None:
    ranges = quantization_ranges(CALIBRATION)
    expected = quantize_embeddings(EMBEDDINGS, precision=precision, ranges=ranges)
    ours = quantize(EMBEDDINGS, precision, ranges)
    assert ours.dtype == expected.dtype
    np.testing.assert_array_equal(ours, expected)


def test_float32_is_unchanged_and_unknown_precision_is_named() -> None:
    np.testing.assert_array_equal(quantize(EMBEDDINGS, "float32"), EMBEDDINGS)
    with pytest.raises(ValueError, match="precision 'int4' is not one of"):
        quantize(EMBEDDINGS, "int4")
    with pytest.raises(ValueError, match="int8 output needs calibration ranges"):
        quantize(EMBEDDINGS, "int8")


def test_calibration_files(tmp_path: Path) -> None:
    jsonl = tmp_path / "texts.jsonl"
    jsonl.write_text('{"text": "one"}\n\n{"text": "two"}\n', encoding="utf-8")
    txt = tmp_path / "texts.txt"
    txt.write_text("alpha\n\nbeta\ngamma\n", encoding="utf-8")
    assert load_calibration_texts(jsonl) == ["one", "two"]
    assert load_calibration_texts(txt) == ["alpha", "beta", "gamma"]
    with pytest.raises(ValueError, match="does not exist"):
        load_calibration_texts(tmp_path / "missing.txt")
    (tmp_path / "one.txt").write_text("only\n", encoding="utf-8")
    with pytest.raises(ValueError, match="has 1 texts"):
        load_calibration_texts(tmp_path / "one.txt")


def test_ranges_are_kept_per_output_options() -> None:
    calibration = Calibration(["a", "b"])
    params = PoolingParams(normalize=False)
    assert calibration.ranges(params) is None
    stored = calibration.store(params, CALIBRATION)
    np.testing.assert_array_equal(calibration.ranges(params), stored)
    assert calibration.ranges(PoolingParams(dimensions=8)) is None
    with pytest.raises(OutputNotSupportedError, match="--calibration-file"):
        Calibration(None).check("uint8")
    Calibration(None).check("binary")
