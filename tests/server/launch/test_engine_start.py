"""``EngineStart`` (``wde serve --api-workers``): the engine process reads the models' configs and sends them
to the supervisor, which never imports torch; a bad model folder comes back as the error a single process
raises (``wde serve`` refuses it in one line); told to end (one process serves after all), it exits 0 and
leaves no socket folder behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from server.launch.supervisor import EngineStart
from server.settings import ServerSettings
from tests.tiny_models import save_tiny_bert
from wde import EngineArgs

pytestmark = pytest.mark.slow  # an engine process per test, ~6 s


def test_the_configs_come_back_equal_to_this_process_s_and_the_process_ends_when_told(tmp_path: Path) -> None:
    args = EngineArgs(model=str(save_tiny_bert(tmp_path / "tiny")))
    start = EngineStart([args], ServerSettings(api_workers=4), "warning")
    try:
        ((got_args, config),) = start.configs()
    finally:
        start.end()
    assert got_args is args
    expected = args.create_engine_config()
    assert config.model_config == expected.model_config
    assert config.scheduler_config == expected.scheduler_config
    assert start.process.exitcode == 0 and not os.path.exists(start.ipc_dir)


def test_a_bad_model_folder_is_the_single_process_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-model-here"
    with pytest.raises((ValueError, OSError)) as in_process:
        EngineArgs(model=str(missing)).create_engine_config()
    start = EngineStart([EngineArgs(model=str(missing))], ServerSettings(api_workers=2), "warning")
    with pytest.raises(type(in_process.value)) as crossed:
        start.configs()
    assert str(crossed.value) == str(in_process.value)
    assert not start.process.is_alive() and not os.path.exists(start.ipc_dir)
