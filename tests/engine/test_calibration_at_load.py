"""``calibrate_at_load``: an engine computes the int8 / uint8 ranges of requests with no option as it loads,
the same ranges a first int8 request computes (the bundled MiniLM on the bundled set), with one INFO line;
``AsyncLLMEngine(calibrate_at_load=True)`` has them before it says ready, of --calibration-file's texts when
given; a cross-encoder computes nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

import wde
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.calibration_at_load import calibrate_at_load
from wde.entrypoints.output_precision import Calibration, calibration_options, default_option_sets
from wde.inputs import PoolingParams


def test_the_ranges_at_load_are_those_of_a_first_request(
    default_llm: wde.LLM, caplog: pytest.LogCaptureFixture
) -> None:
    calibration = Calibration.bundled()
    with caplog.at_level(logging.INFO, logger="wde.entrypoints.calibration_at_load"):
        calibrate_at_load(default_llm.engine, calibration)
    (line,) = [record.getMessage() for record in caplog.records]
    assert line.startswith("int8 / uint8 ranges: 300 texts of the bundled set (wde/calibration) embedded")
    assert "for 1 option set(s) in " in line
    (options,) = default_option_sets(default_llm.model_config)
    at_load = calibration.ranges(options)
    assert at_load is not None and at_load.shape == (2, 384)
    default_llm.encode("a first request", precision="int8")  # the LLM's own calibration: on first use
    on_first_use = default_llm.calibration.ranges(options)
    assert on_first_use is not None
    np.testing.assert_allclose(at_load, on_first_use, atol=1e-6)
    # already kept: nothing runs again
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="wde.entrypoints.calibration_at_load"):
        calibrate_at_load(default_llm.engine, calibration)
    assert "for 0 option set(s)" in caplog.records[0].getMessage()


def test_an_async_engine_has_them_when_ready_from_the_calibration_file(
    tmp_path: Path, default_llm: wde.LLM
) -> None:
    path = tmp_path / "texts.txt"
    path.write_text("A cat sat on the mat.\nStock markets fell sharply today.\nRain is expected.\n")
    engine = AsyncLLMEngine(EngineArgs(calibration_file=str(path)), calibrate_at_load=True)
    engine.start()
    try:
        engine.wait_until_ready(timeout=120)
        options = calibration_options(PoolingParams(), engine.info.model_config)
        ranges = engine.calibration.ranges(options)
    finally:
        engine.shutdown(timeout=60)
    assert engine.calibration.describe() == {"source": str(path), "num_texts": 3}
    expected = np.stack([output.embedding for output in default_llm.encode(path.read_text().splitlines())])
    assert ranges is not None
    np.testing.assert_allclose(ranges, np.stack([expected.min(axis=0), expected.max(axis=0)]), atol=1e-6)


def test_a_cross_encoder_computes_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tests.tiny_models import save_tiny_bert

    path = save_tiny_bert(tmp_path, architecture="BertForSequenceClassification", num_labels=1)
    llm = wde.LLM(str(path))
    calibration = Calibration.bundled()
    with caplog.at_level(logging.INFO, logger="wde.entrypoints.calibration_at_load"):
        calibrate_at_load(llm.engine, calibration)
    assert caplog.records == [] and default_option_sets(llm.model_config) == []
