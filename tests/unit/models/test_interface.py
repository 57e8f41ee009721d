"""The model contract (``wde/models/interface.py``): every registered class is a ``WdeModel`` whose
declarations agree with what it implements, and nothing outside ``wde/models/`` probes a model with
``getattr`` / ``hasattr``."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import torch

from wde.config import TASK_NAMES, PoolingConfig
from wde.layers.pooler.methods import PoolingMetadata
from wde.model_folder.registry import MODEL_REGISTRY
from wde.models.interface import WdeModel
from wde.output_kinds import OUTPUT_KINDS

REPO = Path(__file__).resolve().parents[3]
# Expressions that hold a model class or instance where the engine reads one.
MODEL_NAMES = {"model", "model_cls", "model_class"}
MODEL_ATTRIBUTES = {"model", "model_cls", "model_class"}

ARCHITECTURES = sorted(MODEL_REGISTRY)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_registered_classes_are_wde_models(architecture: str) -> None:
    assert issubclass(MODEL_REGISTRY[architecture], WdeModel)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_declarations_agree_with_the_implementation(architecture: str) -> None:
    model_cls = MODEL_REGISTRY[architecture]
    assert model_cls.supported_tasks and set(model_cls.supported_tasks) <= set(TASK_NAMES) - {"auto"}
    assert model_cls.supported_outputs and set(model_cls.supported_outputs) <= set(OUTPUT_KINDS)
    # the score task reads the classifier; SPLADE's sparse output reads the masked-LM head
    assert model_cls.has_classifier == ("score" in model_cls.supported_tasks)
    assert model_cls.has_mlm_head == ("sparse" in model_cls.supported_outputs)
    # every family wde serves compiles its blocks (--compile-model, int8)
    assert model_cls.supports_compile_blocks
    # an LLM reranker declares its tokens and its template together
    assert (model_cls.score_tokens is None) == (model_cls.pair_template is None)
    assert model_cls.default_pooling is None or isinstance(model_cls.default_pooling, PoolingConfig)


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


class _Bare(WdeModel):
    """A family that declares only what it must (what the defaults cover is left out)."""

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return input_ids

    def load_weights(self, weights: Any) -> set[str]:
        return set()


class _Classifier(_Bare):
    supported_tasks = ("score",)

    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        return hidden_states


def test_defaults_and_derived_flags() -> None:
    bare = _Bare({"hidden_size": 4})
    assert bare.config == {"hidden_size": 4}
    assert bare.supported_tasks == ("embed",) and bare.supported_outputs == ("dense",)
    assert bare.weight_prefixes == ()
    assert bare.default_pooling is None and bare.pair_template is None and bare.score_tokens is None
    assert bare.supports_cuda_graphs and bare.reserved_positions({}) == 0
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
