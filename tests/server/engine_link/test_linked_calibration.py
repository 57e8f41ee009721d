"""The int8 / uint8 ranges with API workers (``wde serve --api-workers N``) are embedded once per server, not
once per process: the engine process computes the default option sets' ranges as a model loads and every
worker hears them (at hello, and as they are computed); ranges a worker computes on a first request with
other options reach the engine process and every other worker (``Ranges``, server/engine_link)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from server.engine_link.client import EngineLink
from tests.server.linked_engine import engine_process_over
from tests.tiny_models import SEED, save_tiny_bert
from wde import LLM, EngineArgs
from wde.entrypoints.calibration_at_load import calibrate_at_load
from wde.entrypoints.output_precision import Calibration, calibration_options, default_option_sets
from wde.inputs import PoolingParams

pytestmark = pytest.mark.slow  # an engine process, ~10 s

ATOL = 1e-5  # the engine process and this one may time different float32 GEMMs at load
TIMEOUT = 30.0
OTHER_OPTIONS = PoolingParams(max_input_tokens=8)  # in no default option set


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"not within {TIMEOUT} s: {what}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def embedder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("calibration-embedder"), seed=SEED + 31)


@pytest.mark.anyio
async def test_ranges_are_computed_once_per_server_and_shared(embedder_dir: Path) -> None:
    with engine_process_over([EngineArgs(model=str(embedder_dir))]) as (process, (engine,)):
        model_config = engine.info.model_config
        defaults = default_option_sets(model_config)
        assert defaults
        # 1. the default sets' ranges come from the engine process's load, before any request; they equal
        #    those this process computes from the same texts and weights
        calibration = engine.calibration
        wait_until(
            lambda: all(calibration.ranges(options) is not None for options in defaults), "ranges heard"
        )
        expected = Calibration.bundled()
        calibrate_at_load(LLM(model=str(embedder_dir)).engine, expected)
        for options in defaults:
            np.testing.assert_allclose(calibration.ranges(options), expected.ranges(options), atol=ATOL)
        # 2. an int8 request with no option computes nothing in the worker
        computed: list[PoolingParams] = []
        share = calibration.on_store
        assert share is not None

        def counted(options: PoolingParams, ranges: np.ndarray) -> None:
            computed.append(options)
            share(options, ranges)

        calibration.on_store = counted
        (output,) = await engine.encode(["a first request"], precision="int8")
        assert np.asarray(output.embedding).dtype == np.int8 and computed == []
        # 3. a worker that connects later hears every set kept so far at hello
        later = EngineLink("test1", process.ipc_dir, None, calibrations=[Calibration.bundled()])
        later.start()
        try:
            later_calibration = later.calibrations[0]
            wait_until(lambda: len(later_calibration.kept()) == len(defaults), "ranges heard at hello")
            # 4. ranges the first worker computes for other options reach it through the engine process
            await engine.encode(["another request"], precision="int8", max_input_tokens=8)
            other = calibration_options(OTHER_OPTIONS, model_config)
            assert computed == [other]
            wait_until(lambda: later_calibration.ranges(other) is not None, "another worker's ranges")
            np.testing.assert_array_equal(later_calibration.ranges(other), calibration.ranges(other))
        finally:
            later.close()
