"""The loop's task table: one workflow per task with its stage classes, the same tasks as the doors'
table, and a clear error for an unknown task."""

from __future__ import annotations

import pytest

from wde.engine.input_processor import InputProcessor
from wde.engine.output_processor import EmbeddingOutputProcessor, ScoreOutputProcessor
from wde.engine.pair_input_processor import PairInputProcessor
from wde.engine.workflow import WORKFLOWS, get_workflow
from wde.entrypoints.tasks import TASKS


def test_each_task_has_its_stage_classes() -> None:
    assert get_workflow("embed").input_processor is InputProcessor
    assert get_workflow("embed").output_processor is EmbeddingOutputProcessor
    assert get_workflow("score").input_processor is PairInputProcessor
    assert get_workflow("score").output_processor is ScoreOutputProcessor
    for task, workflow in WORKFLOWS.items():
        assert workflow.task == task


def test_the_loop_and_the_doors_know_the_same_tasks() -> None:
    assert set(WORKFLOWS) == set(TASKS)


def test_unknown_task_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"no task 'classify'; known: \['embed', 'score'\]"):
        get_workflow("classify")
