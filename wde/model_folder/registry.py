"""HF ``architectures`` -> ``ModelEntry``: the model class wde serves it with, named lazily
(``"wde.models.bert:BertModel"``: imported by the loader, ``wde/worker/model_loader.py``, when the model is
built), and the facts the model-folder readers need before that, torch-free: tasks, output kinds, default
pooling, an LLM reranker's template and tokens, and the config hooks. Reading a ``config.json`` imports no
family. A new family is its model file (``wde/models/``, a ``WdeModel``) plus one line here; a published name
served by an existing class is one line in ``ALIASES``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wde.config import PoolingConfig, TaskAdapters
from wde.model_folder import jina_v3_config, nomic_bert_config
from wde.model_folder.llm_reranker import QWEN3_RERANKER, LlmReranker
from wde.model_folder.position_tables import (
    mpnet_reserved_positions,
    no_reserved_positions,
    roberta_reserved_positions,
)

SCORE = ("score",)
SPLADE = ("sparse", "dense")  # a masked-LM class: SPLADE's sparse output (a SparseEncoder folder), or dense
LAST_TOKEN = PoolingConfig(method="last", normalize=True)  # a decoder embeds as Qwen3-Embedding does
MEAN = PoolingConfig(method="mean", normalize=False)  # EuroBERT


def config_as_is(hf_config: dict[str, Any]) -> dict[str, Any]:
    return hf_config


def no_task_adapters(hf_config: dict[str, Any], model_path: str) -> TaskAdapters | None:
    return None


@dataclass(frozen=True)
class ModelEntry:
    """One model class and what the readers know of it; every field but ``class_path`` has the default most
    classes take, so an entry names only what differs."""

    class_path: str
    """``"module:Class"`` of a ``WdeModel`` subclass; only the loader imports it."""

    tasks: tuple[str, ...] = ("embed",)
    """The tasks it serves ("embed", "score"); the first is the default of ``--task auto``. The class
    implements ``compute_logits`` exactly when "score" is here (``tests/unit/models/test_interface.py``)."""

    outputs: tuple[str, ...] = ("dense",)
    """The embed task's output kinds it can produce (``wde.output_kinds``); model-folder files may add others
    (BGE-M3's heads, a ColBERT's modules). "sparse" here: the class implements ``compute_mlm_logits``."""

    default_pooling: PoolingConfig | None = None
    """Pooling without sentence-transformers metadata; None: CLS + normalize."""

    reranker: LlmReranker | None = None
    """An LLM reranker's pair template and score tokens (its score task); None: a classifier or none."""

    standard_config: Callable[[dict[str, Any]], dict[str, Any]] = config_as_is
    """``config.json`` under transformers' names, which the engine reads (hidden_size,
    max_position_embeddings, ...): a family whose published configs spell them otherwise (NomicBERT's GPT-2
    names) maps them; idempotent. ``read_model_info`` applies it first: the model is built from its result."""

    reserved_positions: Callable[[dict[str, Any]], int] = no_reserved_positions
    """Rows of the position table no token can use (``wde/model_folder/position_tables.py``)."""

    task_adapters: Callable[[dict[str, Any], str], TaskAdapters | None] = no_task_adapters
    """(config, model folder) -> the LoRA task adapters a request can pick (``ModelConfig.task_adapters``),
    read before load so that a request naming one the checkpoint lacks is refused at the door; the family
    runs each token with its request's adapter (``wde/layers/lora.py``)."""

    @property
    def class_name(self) -> str:
        return self.class_path.rsplit(":", 1)[-1]


# the config hooks of the families whose published configs need them (torch-free modules beside this one)
JINA_V3_HOOKS: dict[str, Any] = {
    "standard_config": jina_v3_config.standard_config,
    "task_adapters": jina_v3_config.read_task_adapters,
}
NOMIC_BERT_HOOKS: dict[str, Any] = {
    "standard_config": nomic_bert_config.standard_config,
    "reserved_positions": nomic_bert_config.reserved_positions,
}


# one line per class wde serves, under the architecture name transformers gives it
ENTRIES: dict[str, ModelEntry] = {
    "BertModel": ModelEntry("wde.models.bert:BertModel"),
    "BertForSequenceClassification": ModelEntry("wde.models.bert:BertForSequenceClassification", SCORE),
    "BertForMaskedLM": ModelEntry("wde.models.bert:BertForMaskedLM", outputs=SPLADE),
    "XLMRobertaModel": ModelEntry(
        "wde.models.xlm_roberta:XLMRobertaModel", reserved_positions=roberta_reserved_positions
    ),
    "XLMRobertaForSequenceClassification": ModelEntry(
        "wde.models.xlm_roberta:XLMRobertaForSequenceClassification",
        SCORE,
        reserved_positions=roberta_reserved_positions,
    ),
    "ModernBertModel": ModelEntry("wde.models.modernbert:ModernBertModel"),
    "ModernBertForSequenceClassification": ModelEntry(
        "wde.models.modernbert:ModernBertForSequenceClassification", SCORE
    ),
    "MPNetModel": ModelEntry("wde.models.mpnet:MPNetModel", reserved_positions=mpnet_reserved_positions),
    "MPNetForSequenceClassification": ModelEntry(
        "wde.models.mpnet:MPNetForSequenceClassification", SCORE, reserved_positions=mpnet_reserved_positions
    ),
    "DistilBertModel": ModelEntry("wde.models.distilbert:DistilBertModel"),
    "DistilBertForSequenceClassification": ModelEntry(
        "wde.models.distilbert:DistilBertForSequenceClassification", SCORE
    ),
    "DistilBertForMaskedLM": ModelEntry("wde.models.distilbert:DistilBertForMaskedLM", outputs=SPLADE),
    "Qwen3Model": ModelEntry("wde.models.qwen3:Qwen3Model", default_pooling=LAST_TOKEN),
    # Qwen3-Embedding (embed, the default) and Qwen3-Reranker (score: the "yes" / "no" logits)
    "Qwen3ForCausalLM": ModelEntry(
        "wde.models.qwen3:Qwen3ForCausalLM",
        ("embed", "score"),
        default_pooling=LAST_TOKEN,
        reranker=QWEN3_RERANKER,
    ),
    "Qwen2Model": ModelEntry("wde.models.qwen2:Qwen2Model", default_pooling=LAST_TOKEN),
    # gte-Qwen2, stella: embeddings (lm_head skipped)
    "Qwen2ForCausalLM": ModelEntry("wde.models.qwen2:Qwen2ForCausalLM", default_pooling=LAST_TOKEN),
    "MistralModel": ModelEntry("wde.models.mistral:MistralModel", default_pooling=LAST_TOKEN),
    # e5-mistral, SFR-Embedding-Mistral: embeddings
    "MistralForCausalLM": ModelEntry("wde.models.mistral:MistralForCausalLM", default_pooling=LAST_TOKEN),
    "Gemma3TextModel": ModelEntry("wde.models.gemma3:Gemma3TextModel"),
    "DebertaV2Model": ModelEntry("wde.models.deberta_v2:DebertaV2Model"),
    "DebertaV2ForSequenceClassification": ModelEntry(
        "wde.models.deberta_v2:DebertaV2ForSequenceClassification", SCORE
    ),
    "GteModel": ModelEntry("wde.models.gte:GteModel"),
    "GteForSequenceClassification": ModelEntry("wde.models.gte:GteForSequenceClassification", SCORE),
    "EuroBertModel": ModelEntry("wde.models.eurobert:EuroBertModel", default_pooling=MEAN),
    # the published checkpoints: embeddings (lm_head skipped)
    "EuroBertForMaskedLM": ModelEntry("wde.models.eurobert:EuroBertForMaskedLM", default_pooling=MEAN),
    "EuroBertForSequenceClassification": ModelEntry(
        "wde.models.eurobert:EuroBertForSequenceClassification",
        SCORE,
        default_pooling=MEAN,
    ),
    # transformers', and the published (remote code nomic-bert-2048)
    "NomicBertModel": ModelEntry("wde.models.nomic_bert:NomicBertModel", **NOMIC_BERT_HOOKS),
    "NomicBertForSequenceClassification": ModelEntry(
        "wde.models.nomic_bert:NomicBertForSequenceClassification", SCORE, **NOMIC_BERT_HOOKS
    ),
    "JinaEmbeddingsV3Model": ModelEntry(
        "wde.models.jina_embeddings_v3:JinaEmbeddingsV3Model", **JINA_V3_HOOKS
    ),
    "JinaEmbeddingsV3ForSequenceClassification": ModelEntry(
        "wde.models.jina_embeddings_v3:JinaEmbeddingsV3ForSequenceClassification", SCORE, **JINA_V3_HOOKS
    ),
}
# published names served by another architecture's class
ALIASES: dict[str, str] = {
    "RobertaModel": "XLMRobertaModel",
    "RobertaForSequenceClassification": "XLMRobertaForSequenceClassification",
    "CamembertModel": "XLMRobertaModel",  # RoBERTa-architected (roberta. prefix, positions from pad + 1)
    "CamembertForSequenceClassification": "XLMRobertaForSequenceClassification",
    "NewModel": "GteModel",  # GTE as published (remote code Alibaba-NLP/new-impl): gte-*-en-v1.5
    "NewForTokenClassification": "GteModel",  # gte-multilingual-base: dense embeddings (token head skipped)
    "NewForSequenceClassification": "GteForSequenceClassification",  # gte-multilingual-reranker-base
    "NomicBertForPreTraining": "NomicBertModel",  # the remote code's MLM class: embeddings (cls.* skipped)
    "NomicBertForMaskedLM": "NomicBertModel",  # transformers' masked-LM class: embeddings (cls.* skipped)
    "MPNetForMaskedLM": "MPNetModel",  # as all-mpnet-base-v2 names it: MPNetModel weights (lm_head.* skipped)
    "XLMRobertaLoRA": "JinaEmbeddingsV3Model",  # Jina v3 as published (remote code, xlm-roberta-flash)
}
MODEL_REGISTRY: dict[str, ModelEntry] = {
    **ENTRIES,
    **{alias: ENTRIES[architecture] for alias, architecture in ALIASES.items()},
}
# Jina v3 is also published under XLM-R's names: its config's RoPE / adapters route it to its own classes
JINA_ENTRIES_OF_XLM_R_NAMES: dict[str, ModelEntry] = {
    "XLMRobertaModel": ENTRIES["JinaEmbeddingsV3Model"],
    "RobertaModel": ENTRIES["JinaEmbeddingsV3Model"],
    "XLMRobertaForSequenceClassification": ENTRIES["JinaEmbeddingsV3ForSequenceClassification"],
    "RobertaForSequenceClassification": ENTRIES["JinaEmbeddingsV3ForSequenceClassification"],
}


def resolve_architecture(
    architectures: list[str] | None, model_path: str, hf_config: dict[str, Any] | None = None
) -> tuple[str, ModelEntry]:
    """The first of config.json's ``architectures`` that wde serves, and its entry; with ``hf_config``, a
    Jina v3 config under an XLM-R architecture name gets Jina's entry (never plain XLM-R's, whose class lacks
    its RoPE and adapters)."""
    for architecture in architectures or []:
        jina_entry = JINA_ENTRIES_OF_XLM_R_NAMES.get(architecture)
        if jina_entry is not None and hf_config is not None and jina_v3_config.is_jina_layout(hf_config):
            return architecture, jina_entry
        if architecture in MODEL_REGISTRY:
            return architecture, MODEL_REGISTRY[architecture]
    raise ValueError(
        f"{model_path}/config.json declares architectures {architectures}, which wde does not support; "
        f"supported: {', '.join(sorted(MODEL_REGISTRY))}"
    )
