"""A workflow names the class used at each engine stage for one task; the engine is built from it.

``WORKFLOWS`` is the task table of the loop: task name -> its stage classes. What each task serves to a
caller (encode, score, rerank, classify) is the front doors' business (``wde.entrypoints.tasks``)."""

from __future__ import annotations

from dataclasses import dataclass

from wde.engine.input_processor import InputProcessor
from wde.engine.output_processor import EmbeddingOutputProcessor, OutputProcessor, ScoreOutputProcessor
from wde.engine.pair_input_processor import PairInputProcessor
from wde.engine.request_processor import RequestProcessor
from wde.engine.scheduler import Scheduler


@dataclass(frozen=True)
class Workflow:
    task: str
    input_processor: type[InputProcessor]
    request_processor: type[RequestProcessor]
    scheduler: type[Scheduler]
    output_processor: type[OutputProcessor]


EMBED = Workflow(
    task="embed",
    input_processor=InputProcessor,
    request_processor=RequestProcessor,
    scheduler=Scheduler,
    output_processor=EmbeddingOutputProcessor,
)

# Cross-encoders: (text_1, text_2) pairs tokenized together, scored by the classifier head.
SCORE = Workflow(
    task="score",
    input_processor=PairInputProcessor,
    request_processor=RequestProcessor,
    scheduler=Scheduler,
    output_processor=ScoreOutputProcessor,
)


WORKFLOWS: dict[str, Workflow] = {EMBED.task: EMBED, SCORE.task: SCORE}


def get_workflow(task: str) -> Workflow:
    """The stage classes of ``task``; a ValueError naming the known tasks otherwise."""
    if task not in WORKFLOWS:
        raise ValueError(f"no task {task!r}; known: {sorted(WORKFLOWS)}")
    return WORKFLOWS[task]
