"""``calibrate_at_load``: the server's engine computes the int8 / uint8 ranges of the options that requests
with no option use (``output_precision.default_option_sets``) as it loads, on the engine thread before it
takes work, so that no request waits for them and ``/health`` says ready only once they are kept. Other
option sets (a prompt, dimensions) are computed on their first request (``tasks.calibrated_ranges``)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence

from wde.engine.llm_engine import LLMEngine
from wde.entrypoints import tasks
from wde.entrypoints.output_precision import BUNDLED, Calibration, default_option_sets
from wde.inputs import PoolingParams, PromptType
from wde.outputs import RequestOutput

logger = logging.getLogger(__name__)


def calibrate_at_load(engine: LLMEngine, calibration: Calibration) -> None:
    """Embed ``calibration``'s texts once per default option set of the engine's model, keeping their
    ranges in ``calibration``; nothing for a model without dense output (a cross-encoder, SPLADE)."""
    # 1. the option sets (none: nothing to do)
    model_config = engine.model_config
    option_sets = default_option_sets(model_config)
    if not option_sets:
        return
    # 2. the calibration texts through the engine, inline (nothing else runs on it yet)
    start = time.perf_counter()
    plan = tasks.calibrate(model_config, calibration, option_sets)
    num_computed = tasks.run_plan(plan, functools.partial(_run_inline, engine))
    if not num_computed:  # kept from an earlier load of the same model (a swap back)
        return
    # 3. one line saying what was computed from what
    source = "the bundled set (wde/calibration)" if calibration.source == BUNDLED else calibration.source
    logger.info(
        "int8 / uint8 ranges: %d texts of %s embedded for %d option set(s) in %.2f s",
        len(calibration.texts),
        source,
        num_computed,
        time.perf_counter() - start,
    )


def _run_inline(
    engine: LLMEngine, prompts: Sequence[PromptType], params: PoolingParams
) -> list[RequestOutput]:
    """Run ``prompts`` to completion on an engine that nothing else drives; outputs in order."""
    request_ids = [f"calibration-{index}" for index in range(len(prompts))]
    engine.add_requests(request_ids, prompts, params)
    outputs: dict[str, RequestOutput] = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            outputs[output.request_id] = output
    return [outputs[request_id] for request_id in request_ids]
