"""The model contract (``wde/models/interface.py``) and the registry (``wde/model_folder/registry.py``): every
entry names a ``WdeModel`` whose implementation agrees with the entry's facts, and nothing outside
``wde/models/`` probes a model with ``getattr`` / ``hasattr``."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from wde.config import TASK_NAMES, PoolingConfig
from wde.layers.pooler.methods import PoolingMetadata
from wde.model_folder.registry import JINA_ENTRIES_OF_XLM_R_NAMES, MODEL_REGISTRY, ModelEntry
from wde.models.interface import WdeModel
from wde.output_kinds import OUTPUT_KINDS
from wde.worker.model_loader import model_class

REPO = Path(__file__).resolve().parents[3]
# Expressions that hold a model class or instance where the engine reads one.
MODEL_NAMES = {"model", "model_cls", "model_class"}
MODEL_ATTRIBUTES = {"model", "model_cls", "model_class"}

ARCHITECTURES = sorted(MODEL_REGISTRY)
# what a registry entry says of its class, under the entry's names and the ones classes used to declare
ENTRY_FACTS = (
    *(field.name for field in dataclasses.fields(ModelEntry) if field.name != "class_path"),
    "supported_tasks",
    "supported_outputs",
    "pair_template",
    "score_tokens",
    "default_instruction",
)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_registered_classes_are_wde_models(architecture: str) -> None:
    entry = MODEL_REGISTRY[architecture]
    model_cls = model_class(entry)
    assert issubclass(model_cls, WdeModel) and model_cls.__name__ == entry.class_name


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_the_entry_agrees_with_the_class(architecture: str) -> None:
    entry = MODEL_REGISTRY[architecture]
    model_cls = model_class(entry)
    assert entry.tasks and set(entry.tasks) <= set(TASK_NAMES) - {"auto"}
    assert entry.outputs and set(entry.outputs) <= set(OUTPUT_KINDS)
    # the score task reads the classifier; SPLADE's sparse output reads the masked-LM head
    assert model_cls.has_classifier == ("score" in entry.tasks)
    assert model_cls.has_mlm_head == ("sparse" in entry.outputs)
    # every family wde serves compiles its blocks (--compile-model, int8)
    assert model_cls.supports_compile_blocks
    # an LLM reranker scores with its tokens' logits: its class serves the score task with a classifier
    assert entry.reranker is None or ("score" in entry.tasks and entry.reranker.score_tokens)
    assert entry.default_pooling is None or isinstance(entry.default_pooling, PoolingConfig)
    # one source of truth: the class repeats none of its entry's facts (nor their old names)
    repeated = [name for name in ENTRY_FACTS if hasattr(model_cls, name)]
    assert repeated == [], f"{model_cls.__name__} declares {repeated}: they belong to its registry entry"


def test_jina_routing_names_registered_entries() -> None:
    assert set(JINA_ENTRIES_OF_XLM_R_NAMES) <= set(MODEL_REGISTRY)
    assert all(entry in MODEL_REGISTRY.values() for entry in JINA_ENTRIES_OF_XLM_R_NAMES.values())


@pytest.mark.parametrize(
    ("architecture", "hf_config", "expected"),
    [
        ("BertModel", {"pad_token_id": 0}, 0),
        ("XLMRobertaModel", {"pad_token_id": 1}, 2),
        ("RobertaModel", {"pad_token_id": 1}, 2),
        ("XLMRobertaForSequenceClassification", {"pad_token_id": 3}, 4),
        ("MPNetModel", {"pad_token_id": 1}, 2),
        ("MPNetForSequenceClassification", {"pad_token_id": 1}, 2),
        ("Qwen3Model", {"pad_token_id": 151643}, 0),
    ],
)
def test_reserved_positions(architecture: str, hf_config: dict[str, Any], expected: int) -> None:
    assert MODEL_REGISTRY[architecture].reserved_positions(hf_config) == expected


def test_an_entry_names_only_what_differs() -> None:
    entry = ModelEntry("wde.models.bert:BertModel")
    assert entry.class_name == "BertModel" and entry.tasks == ("embed",) and entry.outputs == ("dense",)
    assert entry.default_pooling is None and entry.reranker is None
    assert entry.standard_config({"n_embd": 4}) == {"n_embd": 4} and entry.reserved_positions({}) == 0
    assert entry.task_adapters({}, "/nowhere") is None


def test_an_entry_naming_something_else_is_refused() -> None:
    with pytest.raises(TypeError, match=r"wde\.config:ModelConfig is not a WdeModel subclass"):
        model_class(ModelEntry("wde.config:ModelConfig"))


class _Bare(WdeModel):
    """A family that declares only what it must (what the defaults cover is left out)."""

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return input_ids

    def load_weights(self, weights: Any) -> set[str]:
        return set()


class _Classifier(_Bare):
    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        return hidden_states


def test_defaults_and_derived_flags() -> None:
    bare = _Bare({"hidden_size": 4})
    assert bare.config == {"hidden_size": 4}
    assert bare.weight_prefixes == () and bare.supports_cuda_graphs
    assert not (bare.supports_compile_blocks or bare.has_classifier or bare.has_mlm_head)
    assert _Classifier.has_classifier and not _Classifier.has_mlm_head and not WdeModel.has_classifier


def test_missing_capabilities_raise_naming_the_class() -> None:
    bare = _Bare({})
    hidden = torch.zeros(2, 4)
    with pytest.raises(NotImplementedError, match="_Bare cannot compile its blocks"):
        bare.compile_blocks()
    with pytest.raises(NotImplementedError, match="_Bare has no classifier head"):
        bare.compute_logits(hidden, None)  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="_Bare has no masked-LM head"):
        bare.compute_mlm_logits(hidden)


def _model_probes(path: Path, root: Path = REPO) -> list[str]:
    """``getattr(model, ...)`` / ``hasattr(self.model, ...)`` calls in one source file."""
    probes = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
            continue
        if node.func.id not in ("getattr", "hasattr"):
            continue
        target = node.args[0]
        if (isinstance(target, ast.Name) and target.id in MODEL_NAMES) or (
            isinstance(target, ast.Attribute) and target.attr in MODEL_ATTRIBUTES
        ):
            probes.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return probes


def test_no_getattr_on_a_model_outside_wde_models() -> None:
    """The engine reads a model through the contract's declarations only (``WdeModel``)."""
    sources = [*(REPO / "wde").rglob("*.py"), *(REPO / "server").rglob("*.py")]
    outside = [path for path in sources if (REPO / "wde" / "models") not in path.parents]
    assert len(outside) > 50  # the scan sees the tree
    probes = [probe for path in outside for probe in _model_probes(path)]
    assert probes == [], "declare it on WdeModel (wde/models/interface.py) instead:\n" + "\n".join(probes)


def test_the_scan_finds_a_probe(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "def f(model, runner, model_config):\n"
        "    getattr(model, 'pair_template', None)\n"
        "    hasattr(runner.model, 'compile_blocks')\n"
        "    getattr(model_config, 'task')\n"
    )
    probes = [probe.split(": ", 1)[1] for probe in _model_probes(source, tmp_path)]
    assert probes == ["getattr(model, 'pair_template', None)", "hasattr(runner.model, 'compile_blocks')"]
