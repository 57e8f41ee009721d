"""HF ``architectures`` -> our model classes, each a ``WdeModel`` (``wde/models/interface.py`` declares what
the engine reads from it: tasks, output kinds, pooling, reserved positions, ...). A new family is one line
here plus its model file."""

from __future__ import annotations

from typing import Any

from wde.models.bert import BertForMaskedLM, BertForSequenceClassification, BertModel
from wde.models.deberta_v2 import DebertaV2ForSequenceClassification, DebertaV2Model
from wde.models.distilbert import DistilBertForMaskedLM, DistilBertForSequenceClassification, DistilBertModel
from wde.models.eurobert import EuroBertForMaskedLM, EuroBertForSequenceClassification, EuroBertModel
from wde.models.gemma3 import Gemma3TextModel
from wde.models.gte import GteForSequenceClassification, GteModel
from wde.models.interface import WdeModel
from wde.models.jina_embeddings_v3 import (
    JinaEmbeddingsV3ForSequenceClassification,
    JinaEmbeddingsV3Model,
    is_jina_layout,
)
from wde.models.mistral import MistralForCausalLM, MistralModel
from wde.models.modernbert import ModernBertForSequenceClassification, ModernBertModel
from wde.models.mpnet import MPNetForSequenceClassification, MPNetModel
from wde.models.nomic_bert import NomicBertForSequenceClassification, NomicBertModel
from wde.models.qwen2 import Qwen2ForCausalLM, Qwen2Model
from wde.models.qwen3 import Qwen3ForCausalLM, Qwen3Model
from wde.models.xlm_roberta import XLMRobertaForSequenceClassification, XLMRobertaModel

MODEL_REGISTRY: dict[str, type[WdeModel]] = {
    "BertModel": BertModel,
    "XLMRobertaModel": XLMRobertaModel,
    "RobertaModel": XLMRobertaModel,
    "BertForSequenceClassification": BertForSequenceClassification,
    "BertForMaskedLM": BertForMaskedLM,  # SPLADE (sparse output)
    "XLMRobertaForSequenceClassification": XLMRobertaForSequenceClassification,
    "RobertaForSequenceClassification": XLMRobertaForSequenceClassification,
    "CamembertModel": XLMRobertaModel,  # RoBERTa-architected (roberta. prefix, positions from pad + 1)
    "CamembertForSequenceClassification": XLMRobertaForSequenceClassification,
    "ModernBertModel": ModernBertModel,
    "ModernBertForSequenceClassification": ModernBertForSequenceClassification,
    "MPNetModel": MPNetModel,
    "MPNetForSequenceClassification": MPNetForSequenceClassification,
    "DistilBertModel": DistilBertModel,
    "DistilBertForSequenceClassification": DistilBertForSequenceClassification,
    "DistilBertForMaskedLM": DistilBertForMaskedLM,  # SPLADE (sparse output)
    "Qwen3Model": Qwen3Model,
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
    "Qwen2Model": Qwen2Model,
    "Qwen2ForCausalLM": Qwen2ForCausalLM,  # gte-Qwen2, stella: embeddings (lm_head skipped)
    "MistralModel": MistralModel,
    "MistralForCausalLM": MistralForCausalLM,  # e5-mistral, SFR-Embedding-Mistral: embeddings
    "Gemma3TextModel": Gemma3TextModel,
    "DebertaV2Model": DebertaV2Model,
    "DebertaV2ForSequenceClassification": DebertaV2ForSequenceClassification,
    "GteModel": GteModel,
    "GteForSequenceClassification": GteForSequenceClassification,
    "NewModel": GteModel,  # GTE as published (remote code Alibaba-NLP/new-impl): gte-*-en-v1.5
    "NewForTokenClassification": GteModel,  # gte-multilingual-base: dense embeddings (token head skipped)
    "NewForSequenceClassification": GteForSequenceClassification,  # gte-multilingual-reranker-base
    "EuroBertModel": EuroBertModel,
    "EuroBertForMaskedLM": EuroBertForMaskedLM,  # the published checkpoints: embeddings (lm_head skipped)
    "EuroBertForSequenceClassification": EuroBertForSequenceClassification,
    "NomicBertModel": NomicBertModel,  # transformers', and the published (remote code nomic-bert-2048)
    "NomicBertForPreTraining": NomicBertModel,  # the remote code's MLM class: embeddings (cls.* skipped)
    "NomicBertForMaskedLM": NomicBertModel,  # transformers' masked-LM class: embeddings (cls.* skipped)
    "NomicBertForSequenceClassification": NomicBertForSequenceClassification,
    "JinaEmbeddingsV3Model": JinaEmbeddingsV3Model,
    "XLMRobertaLoRA": JinaEmbeddingsV3Model,  # Jina v3 as published (remote code, xlm-roberta-flash)
    "JinaEmbeddingsV3ForSequenceClassification": JinaEmbeddingsV3ForSequenceClassification,
}
# Jina v3 is also published under XLM-R's names: its config's RoPE / adapters route it to its own classes
JINA_CLASSES_OF_XLM_R_NAMES: dict[str, type[WdeModel]] = {
    "XLMRobertaModel": JinaEmbeddingsV3Model,
    "RobertaModel": JinaEmbeddingsV3Model,
    "XLMRobertaForSequenceClassification": JinaEmbeddingsV3ForSequenceClassification,
    "RobertaForSequenceClassification": JinaEmbeddingsV3ForSequenceClassification,
}


def resolve_architecture(
    architectures: list[str] | None, model_path: str, hf_config: dict[str, Any] | None = None
) -> tuple[str, type[WdeModel]]:
    """The first of config.json's ``architectures`` that wde serves, and its class; with ``hf_config``, a
    Jina v3 config under an XLM-R architecture name gets Jina's class (never plain XLM-R's, which lacks its
    RoPE and adapters)."""
    for architecture in architectures or []:
        jina_cls = JINA_CLASSES_OF_XLM_R_NAMES.get(architecture)
        if jina_cls is not None and hf_config is not None and is_jina_layout(hf_config):
            return architecture, jina_cls
        if architecture in MODEL_REGISTRY:
            return architecture, MODEL_REGISTRY[architecture]
    raise ValueError(
        f"{model_path}/config.json declares architectures {architectures}, which wde does not support; "
        f"supported: {', '.join(sorted(MODEL_REGISTRY))}"
    )
