"""``calibrate_at_load``: an engine computes the int8 / uint8 ranges of requests with no option as it loads,
the same ranges a first int8 request computes (the bundled MiniLM on the bundled set), with one INFO line;
``AsyncLLMEngine(calibrate_at_load=True)`` has them before it says ready, of --calibration-file's texts when
given; a cross-encoder computes nothing; a model swapped out and back in (``--max-loaded-models``) keeps its
ranges and does not embed the texts again."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import numpy as np
import pytest

import wde
from server.served_models.model_registry import ModelRegistry, ServedModel
from tests.tiny_models import SEED, save_tiny_bert
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
    # already kept: nothing runs again, and nothing is said
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="wde.entrypoints.calibration_at_load"):
        calibrate_at_load(default_llm.engine, calibration)
    assert caplog.records == []
    assert calibration.ranges(options) is at_load


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
    path = save_tiny_bert(tmp_path, architecture="BertForSequenceClassification", num_labels=1)
    llm = wde.LLM(str(path))
    calibration = Calibration.bundled()
    with caplog.at_level(logging.INFO, logger="wde.entrypoints.calibration_at_load"):
        calibrate_at_load(llm.engine, calibration)
    assert caplog.records == [] and default_option_sets(llm.model_config) == []


@pytest.mark.anyio
async def test_a_model_swapped_back_in_keeps_its_ranges(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two tiny embedders through one slot, a -> b -> a: two calibrations (one each), not three; a's
    second engine holds the ranges of its first."""
    paths = [save_tiny_bert(tmp_path / name, seed=SEED + index) for index, name in enumerate("ab")]
    models = [ServedModel(EngineArgs(model=str(path), served_model_name=path.name)) for path in paths]
    registry = ModelRegistry(models, max_loaded_models=1)
    with caplog.at_level(logging.INFO, logger="wde.entrypoints.calibration_at_load"):
        registry.start()  # a loads
        try:
            await asyncio.to_thread(registry.wait_until_ready, 120)
            first = models[0].calibration
            for name in ("b", "a"):
                async with registry.use(name) as model:
                    assert model.engine is not None and model.engine.is_ready
            assert models[0].num_loads == 2 and models[0].calibration is first
            assert models[0].engine is not None and models[0].engine.calibration is first
        finally:
            await asyncio.to_thread(registry.shutdown)
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines  # a's first load and b's; a's second computed nothing
