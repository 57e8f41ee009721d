"""Output precision: int8 / uint8 / binary / ubinary equal sentence-transformers' quantize_embeddings on the
same embeddings and ranges (exactly), calibration files, the bundled calibration set (its texts and its
licence), and the options that key the ranges (the engine's defaults filled in)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers.util.quantization import quantize_embeddings

from tests.unit.engine.conftest import make_model_config
from wde.calibration import BUNDLED_TEXTS, load_calibration_texts
from wde.config import ModelConfig
from wde.entrypoints.output_precision import (
    BUNDLED,
    Calibration,
    calibration_options,
    default_option_sets,
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


def test_ranges_are_kept_per_output_options(tmp_path: Path) -> None:
    calibration = Calibration(["a", "b"], "texts.txt")
    params = PoolingParams(normalize=False)
    assert calibration.ranges(params) is None
    stored = calibration.store(params, CALIBRATION)
    np.testing.assert_array_equal(calibration.ranges(params), stored)
    assert calibration.ranges(PoolingParams(dimensions=8)) is None
    with pytest.raises(ValueError, match="has no texts"):
        Calibration([], "empty.txt")
    (tmp_path / "texts.txt").write_text("one\ntwo\n", encoding="utf-8")
    from_file = Calibration.from_file(str(tmp_path / "texts.txt"))
    assert from_file.describe() == {"source": str(tmp_path / "texts.txt"), "num_texts": 2}


def test_the_bundled_set_loads_with_its_source_and_licence() -> None:
    calibration = Calibration.from_file(None)
    assert calibration.source == BUNDLED and calibration.texts == Calibration.bundled().texts
    texts = calibration.texts
    assert 200 <= len(texts) <= 1_000 and len(set(texts)) == len(texts)
    num_words = [len(text.split()) for text in texts]
    assert min(num_words) >= 6 and max(num_words) <= 40 and np.std(num_words) > 5  # varied lengths
    assert all(text[0].isupper() and text.endswith(".") for text in texts)  # sentences of prose
    folder = BUNDLED_TEXTS.parent
    assert BUNDLED_TEXTS.stat().st_size < 100_000
    licence = (folder / "LICENSE").read_text(encoding="utf-8")
    assert licence.startswith("PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2")
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert "pydoc_data/topics.py" in readme and "PSF-2.0" in readme and "Python Software Foundation" in readme


def _config(normalize: bool = True) -> ModelConfig:
    """A fake embedding model with one prompt ("query") that normalizes (or not)."""
    config = make_model_config()
    config.pooling = dataclasses.replace(config.pooling, normalize=normalize)
    return config


def test_calibration_options_fill_in_the_engine_defaults() -> None:
    config = _config()
    plain = calibration_options(PoolingParams(), config)
    assert plain.normalize is True and plain.truncate is True and plain.output == "dense"
    # the doors' spellings of "no option" share one key: TEI's normalize true, a side without a prompt
    assert calibration_options(PoolingParams(normalize=True, output="dense"), config) == plain
    assert calibration_options(PoolingParams(input_type="document", long_input="error"), config) == plain
    # a side with a prompt is that prompt; other options stay apart
    query = calibration_options(PoolingParams(input_type="query"), config)
    assert query == calibration_options(PoolingParams(prompt_name="query"), config) != plain
    assert calibration_options(PoolingParams(dimensions=4), config) != plain
    assert calibration_options(PoolingParams(normalize=False), config) != plain
    assert calibration_options(PoolingParams(truncation_direction="left"), config) != plain
    # a model with a default prompt: no prompt named is that one
    prompted = dataclasses.replace(config, default_prompt_name="query")
    assert calibration_options(PoolingParams(), prompted) == query


def test_default_option_sets_of_each_kind_of_model() -> None:
    config = _config()
    assert default_option_sets(config) == [
        calibration_options(PoolingParams(), config),
        calibration_options(PoolingParams(input_type="query"), config),
    ]
    not_normalized = dataclasses.replace(_config(normalize=False), prompts={})
    assert [options.normalize for options in default_option_sets(not_normalized)] == [False, True]
    assert default_option_sets(dataclasses.replace(config, task="score")) == []
    assert default_option_sets(dataclasses.replace(config, outputs=("sparse",))) == []
