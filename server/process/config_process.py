"""The served models' configs and how many API workers serve them. With API workers the engine process builds
the configs (``supervisor.EngineStart``): reading a model folder imports torch and the model families
(~250 MiB resident), which the supervisor, a process that only watches its children, then never holds; a
bad flag or model folder raises there and crosses back, so ``wde serve`` still refuses it in one line
before anything binds or loads."""

from __future__ import annotations

from collections.abc import Sequence

from wde.config import EngineConfig
from wde.engine_args import EngineArgs
from wde.platforms.cores import usable_cores


def auto_api_workers(num_cores: int, on_gpu: bool) -> tuple[int, str]:
    """(workers, why) that ``--api-workers auto`` chooses for the cores this process may use."""
    if num_cores <= 2:
        return 1, f"auto: {num_cores} cores (the engine needs them; HTTP stays in its process)"
    if on_gpu:
        return min(8, num_cores // 2), f"auto: half of {num_cores} cores on a GPU machine, at most 8"
    return max(1, min(4, num_cores // 4)), f"auto: a quarter of {num_cores} cores on CPU, at most 4"


def workers_likely(api_workers: int | str) -> bool:
    """Whether the server may run API workers, before the configs say whether the device is a GPU: auto's
    choice on a GPU machine, the larger of its two."""
    return max_api_workers(api_workers) > 1


def max_api_workers(api_workers: int | str) -> int:
    """The most workers ``--api-workers`` may start (the admission slots are made before the configs say
    whether the device is a GPU): the number given, or auto's larger choice."""
    if api_workers == "auto":
        return auto_api_workers(usable_cores(), on_gpu=True)[0]
    return int(api_workers)


def build_configs(all_engine_args: Sequence[EngineArgs]) -> list[tuple[EngineArgs, EngineConfig]]:
    """Each model's engine config, built here (with API workers, the engine process builds them:
    ``supervisor.EngineStart``)."""
    return [(engine_args, engine_args.create_engine_config()) for engine_args in all_engine_args]
