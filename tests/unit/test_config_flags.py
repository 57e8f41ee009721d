"""Config, one source of truth: every EngineArgs / ServerSettings field carries its help (and choices) and the
``wde`` parser reads them; every ``*_NAMES`` tuple of ``wde.config`` (what flags and requests accept) names
exactly the keys of the registry that implements it."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from server.cli import build_parser
from server.settings import ServerSettings
from wde.config import (
    ATTENTION_BACKEND_NAMES,
    DENSE_ACTIVATION_NAMES,
    DEVICE_NAMES,
    DTYPE_NAMES,
    EXECUTOR_NAMES,
    POOLING_METHOD_NAMES,
    QUANTIZATION_NAMES,
    RESOLVED_DTYPE_NAMES,
    SCORE_ACTIVATION_NAMES,
    TASK_NAMES,
)
from wde.engine.executor import EXECUTORS
from wde.engine.workflow import WORKFLOWS
from wde.engine_args import EngineArgs
from wde.entrypoints.tasks import TASKS
from wde.flag_field import flag_choices, flag_help
from wde.layers.attention.selector import BACKENDS
from wde.layers.pooler.dense_head import DENSE_ACTIVATIONS
from wde.layers.pooler.methods import POOLING_METHODS
from wde.layers.pooler.poolers import POOLERS
from wde.layers.pooler.score_pooler import SCORE_ACTIVATIONS
from wde.layers.quantization.quantize import QUANTIZERS
from wde.platforms import PLATFORMS
from wde.worker.model_runner import TORCH_DTYPES
from wde.worker.runners import MODEL_RUNNERS

AUTO = "auto"  # a choice that picks one of the registry's entries


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(commands.choices)


@pytest.mark.parametrize("cls", [EngineArgs, ServerSettings])
def test_every_config_field_has_help(cls: type) -> None:
    missing = [field.name for field in fields(cls) if not flag_help(field)]
    assert not missing, f"{cls.__name__} fields without help (declare them with wde.flag_field.flag): " + str(
        missing
    )


@pytest.mark.parametrize("command", ["serve", "embed"])
def test_every_flag_of_the_command_has_help(command: str) -> None:
    parser = _subparsers(build_parser())[command]
    missing = [action.dest for action in parser._actions if not (action.help or "").split(" [env:")[0]]
    assert not missing, f"wde {command} flags without help: {missing}"


@pytest.mark.parametrize("cls", [EngineArgs, ServerSettings])
def test_the_parser_reads_help_and_choices_from_the_fields(cls: type) -> None:
    """No second description: a flag's help starts with its field's, and its choices are the field's."""
    parser = _subparsers(build_parser())["serve"]
    actions = {action.dest: action for action in parser._actions}
    for field in fields(cls):
        if field.name == "model":  # the positional MODEL... of serve: its help plus how several are served
            assert actions["model"].help.startswith(flag_help(field))
            continue
        action = actions[field.name]
        assert action.help.startswith(flag_help(field)), field.name
        expected = flag_choices(field)
        assert (tuple(action.choices) if action.choices else None) == expected, field.name


def test_the_engine_flags_choices_are_the_names_tuples() -> None:
    choices = {field.name: flag_choices(field) for field in fields(EngineArgs)}
    assert choices["task"] == TASK_NAMES and choices["dtype"] == DTYPE_NAMES
    assert choices["device"] == DEVICE_NAMES and choices["executor"] == (AUTO, *EXECUTOR_NAMES)
    assert choices["pooling"] == POOLING_METHOD_NAMES and choices["quantization"] == QUANTIZATION_NAMES
    assert choices["score_activation"] == SCORE_ACTIVATION_NAMES
    # attention_backend also takes aliases (sdpa, flash): its help lists the backends instead
    help_text = flag_help(next(field for field in fields(EngineArgs) if field.name == "attention_backend"))
    assert all(name in help_text for name in BACKENDS)


@pytest.mark.parametrize(
    ("names", "registry"),
    [
        (EXECUTOR_NAMES, EXECUTORS),
        (TASK_NAMES, POOLERS),
        (TASK_NAMES, WORKFLOWS),
        (TASK_NAMES, TASKS),
        (DEVICE_NAMES, PLATFORMS),
        (DEVICE_NAMES, MODEL_RUNNERS),
        (RESOLVED_DTYPE_NAMES, TORCH_DTYPES),
        (ATTENTION_BACKEND_NAMES, BACKENDS),
        (POOLING_METHOD_NAMES, POOLING_METHODS),
        (SCORE_ACTIVATION_NAMES, SCORE_ACTIVATIONS),
        (DENSE_ACTIVATION_NAMES, DENSE_ACTIVATIONS),
        (QUANTIZATION_NAMES, QUANTIZERS),
    ],
    ids=[
        "executors",
        "poolers",
        "workflows",
        "task plans",
        "platforms",
        "model runners",
        "dtypes",
        "attention backends",
        "pooling methods",
        "score activations",
        "dense activations",
        "quantizers",
    ],
)
def test_every_names_tuple_equals_its_registrys_keys(names: tuple[str, ...], registry: dict) -> None:
    assert sorted(name for name in names if name != AUTO) == sorted(registry)
