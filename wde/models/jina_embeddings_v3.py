"""Jina Embeddings v3 on flat, unpadded batches (jinaai/jina-embeddings-v3): XLM-RoBERTa with RoPE instead
of a position table, and five LoRA task adapters.

GTE's blocks (``wde/models/gte.py``: packed qkv with biases -> RoPE -> attention, post-norm) with a plain
MLP ``fc2(gelu(fc1(x)))``, RoPE over whole heads (base 20,000), one token type.

The task adapter is chosen per request: the base weights stay unmerged and every task's LoRA is kept,
stacked (``wde/layers/lora.py``); each token runs with its request's adapter, and one batch mixes tasks
freely. A request's ``prompt_name`` names both its instruction prompt and its adapter when it is one of
``lora_adaptations`` (the prompts of Jina v3's sentence-transformers config are named after the tasks:
``encode(texts, task=t, prompt_name=t)`` there); else it runs with config.json's ``default_task``
(sentence-transformers' ``model_kwargs={"default_task": ...}``), else with the base weights, as the remote
code and sentence-transformers do without a task. A checkpoint without LoRA weights serves the base weights
and refuses a request naming a task (``PoolingParams.verify``): which adapters a request may name is read
from the model directory before load (``wde/model_folder/jina_v3_config.py``, into
``ModelConfig.task_adapters``).

Two layouts, one set of parameters:

- published, for remote code (``"architectures": ["XLMRobertaModel"]`` or ``["XLMRobertaLoRA"]``,
  ``"model_type": "xlm-roberta"``, ``auto_map`` to jinaai/xlm-roberta-flash-implementation,
  ``rotary_emb_base``, ``lora_adaptations``): ``roberta.emb_ln``, ``roberta.encoder.layers.N.mixer.Wqkv``,
  ``mixer.out_proj``, ``mlp.fc1`` / ``fc2``, ``norm1`` / ``norm2``; every linear and embedding as
  ``<module>.parametrizations.weight.original`` with ``.parametrizations.weight.0.lora_A`` / ``lora_B``
  (``[num_tasks, rank, fan_in]`` / ``[num_tasks, fan_out, rank]``; an embedding's ``[num_tasks, num_rows,
  rank]`` / ``[num_tasks, rank, dim]``). wde never runs that code; ``resolve_architecture``
  (``wde/model_folder/registry.py``) routes such a config here, never to the plain XLM-R class.
- transformers' (``JinaEmbeddingsV3Model``, ``"model_type": "jina_embeddings_v3"``): saved under the
  published names without the LoRA (transformers reverses its conversion on save), or as its modules name
  them (``layers.N.self_attn.q_proj``, ``post_attention_layernorm``, ``post_mlp_layernorm``, ...).

The cross-encoder (``JinaEmbeddingsV3ForSequenceClassification``; published for the remote code as
``XLMRobertaForSequenceClassification`` with Jina's config) is this encoder under ``roberta.`` and RoBERTa's
head (``classifier.dense`` -> tanh -> ``classifier.out_proj`` on ``<s>``). transformers' class has no
adapters; LoRA weights on its encoder are served as the embedder serves them (a score request names no
prompt, so it runs with ``default_task``'s adapter, else the base weights); LoRA on the head is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from wde.config import NO_ADAPTER
from wde.layers.activation import get_act_fn
from wde.layers.forward_context import get_forward_context
from wde.layers.lora import AdapterRows, EmbeddingLora, LinearLora, TokenAdapters
from wde.layers.pooler.methods import PoolingMetadata, cls_pool
from wde.layers.rotary import rotary_self_attention
from wde.model_folder.jina_v3_config import LORA_TENSOR, served_task
from wde.models.gte import (
    BlockBiases,
    GteAttention,
    GteEmbeddings,
    GteLayer,
    GteModel,
    GteRope,
    GteRotaryEmbedding,
    refuse_settings,
)
from wde.models.interface import WdeModel
from wde.models.nomic_bert import FLASH_BLOCK_RENAMES
from wde.models.weight_names import WeightTarget, load_weights_by_name, strip_prefix
from wde.models.xlm_roberta import ClassifierHead

DEFAULT_ROPE_THETA = 20_000.0  # transformers' JinaEmbeddingsV3Config and the published rotary_emb_base
WEIGHT_PREFIXES: tuple[str, ...] = ("roberta.",)
_ORIGINAL = re.compile(r"\.parametrizations\.weight\.original$")
# published names -> GTE's (gte.py then maps transformers' module names and fuses their q / k / v)
_RENAMES = (
    (_ORIGINAL, ".weight"),
    *FLASH_BLOCK_RENAMES,
    (re.compile(r"\.mixer\.Wqkv\."), ".attention.qkv_proj."),
    (re.compile(r"\.mixer\.out_proj\."), ".attention.o_proj."),
)


# ---- config ------------------------------------------------------------------------------------------------
def unsupported_settings(config: dict[str, Any]) -> list[str]:
    """What wde does not implement, as set in ``config`` (none in the published checkpoint)."""
    found = []
    rope_type = (config.get("rope_parameters") or {}).get("rope_type", "default")
    if rope_type != "default":
        found.append(f"rope_parameters.rope_type {rope_type!r} (only 'default')")
    if float(config.get("lora_dropout_p", 0.0)) != 0.0:
        found.append(f"lora_dropout_p {config['lora_dropout_p']} (inference has no dropout: set 0)")
    return found


def check_config(config: dict[str, Any]) -> None:
    """Raises one line naming every setting of ``config.json`` wde cannot serve Jina v3 with."""
    refuse_settings("Jina v3", unsupported_settings(config))
    served_task(config)


# ---- layers: each linear and embedding with its task adapters beside it (``<name>_lora``) ----------------
class JinaEmbeddings(GteEmbeddings):
    """Word (+ token type) embeddings, each plus its row's adapter delta -> LayerNorm."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.word_embeddings_lora = EmbeddingLora()
        self.token_type_embeddings_lora = EmbeddingLora()

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None, rows: AdapterRows | None = None
    ) -> torch.Tensor:
        if rows is None:
            return super().forward(input_ids, token_type_ids)
        embeddings = self.word_embeddings_lora.add_to(self.word_embeddings(input_ids), input_ids, rows)
        if self.token_type_embeddings is not None:
            type_ids = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
            types = self.token_type_embeddings(type_ids)  # [num_tokens, hidden_size]
            embeddings = embeddings + self.token_type_embeddings_lora.add_to(types, type_ids, rows)
        return self.LayerNorm(embeddings)


class JinaAttention(GteAttention):
    """GTE's packed qkv -> RoPE -> attention -> output projection, both projections adapted."""

    def __init__(self, config: dict[str, Any], biases: BlockBiases) -> None:
        super().__init__(config, biases)
        self.qkv_proj_lora = LinearLora()
        self.o_proj_lora = LinearLora()

    def forward(
        self,
        hidden_states: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        rows: AdapterRows | None = None,
    ) -> torch.Tensor:
        qkv = self.qkv_proj_lora.add_to(self.qkv_proj(hidden_states), hidden_states, rows)
        attn_out = rotary_self_attention(qkv, self.num_heads, self.head_size, cos, sin, self.attn)
        return self.o_proj_lora.add_to(self.o_proj(attn_out), attn_out, rows)  # [num_tokens, hidden_size]


class JinaMLP(nn.Module):
    """``fc2(act(fc1(x)))`` (XLM-R's MLP under CLIP's names), both linears adapted."""

    def __init__(self, config: dict[str, Any], biases: BlockBiases) -> None:
        super().__init__()
        hidden_size, intermediate_size = config["hidden_size"], config["intermediate_size"]
        self.fc1 = nn.Linear(hidden_size, intermediate_size)
        self.act = get_act_fn(config.get("hidden_act", "gelu"))
        self.fc2 = nn.Linear(intermediate_size, hidden_size, bias=biases.down)
        self.fc1_lora = LinearLora()
        self.fc2_lora = LinearLora()

    def forward(self, hidden_states: torch.Tensor, rows: AdapterRows | None = None) -> torch.Tensor:
        up = self.fc1_lora.add_to(self.fc1(hidden_states), hidden_states, rows)  # [num_tokens, intermediate]
        up = self.act(up)
        return self.fc2_lora.add_to(self.fc2(up), up, rows)  # [num_tokens, hidden_size]


class JinaLayer(GteLayer):
    """GTE's post-norm block with the plain MLP, every linear adapted per row."""

    mlp_cls = JinaMLP
    attention_cls = JinaAttention
    attention: JinaAttention
    mlp: JinaMLP

    def forward(
        self,
        hidden_states: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        rows: AdapterRows | None = None,
    ) -> torch.Tensor:
        hidden_states = self.attn_ln(hidden_states + self.attention(hidden_states, cos, sin, rows))
        return self.mlp_block(hidden_states, rows)

    def mlp_block(self, hidden_states: torch.Tensor, rows: AdapterRows | None = None) -> torch.Tensor:
        """MLP -> residual add -> LayerNorm (what ``compile_blocks`` compiles; ``rows`` guarded by dynamo)."""
        return self.mlp_ln(hidden_states + self.mlp(hidden_states, rows))


# ---- model -------------------------------------------------------------------------------------------------
class JinaEmbeddingsV3Model(GteModel):
    """Embeddings + layers, each token with its request's task adapter; returns the last hidden state
    ``[num_tokens, hidden_size]`` (mean pooling and normalize, as the sentence-transformers config says)."""

    weight_prefixes = WEIGHT_PREFIXES
    layer_cls = JinaLayer
    embeddings_cls = JinaEmbeddings
    embeddings: JinaEmbeddings

    def __init__(self, config: dict[str, Any], add_pooler: bool = False) -> None:
        super().__init__(config, add_pooler)
        self.num_adapters = 0  # the checkpoint's, set by load_weights (0: the base weights for every token)
        self.default_adapter = NO_ADAPTER  # a token's adapter when the batch names none (default_task's)

    def check_config(self, config: dict[str, Any]) -> None:
        check_config(config)

    def block_biases(self, config: dict[str, Any]) -> BlockBiases:
        return BlockBiases(qkv=True, output=True, down=True)

    def make_rotary(self, config: dict[str, Any], head_size: int) -> GteRotaryEmbedding:
        theta = (config.get("rope_parameters") or {}).get("rope_theta", DEFAULT_ROPE_THETA)
        return GteRotaryEmbedding(head_size, GteRope(float(theta)))

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        # each token's adapter (the batch's, else default_task's), read by every adapted layer
        tokens = get_forward_context().adapters or TokenAdapters(single=self.default_adapter)
        rows = AdapterRows.of(tokens, self.num_adapters, self.embeddings.word_embeddings.weight.dtype)
        hidden_states = self.embeddings(input_ids, token_type_ids, rows)  # [num_tokens, hidden_size]
        # cos, sin [num_tokens, 1, head_size]: once per forward, shared by every layer
        cos, sin = self.rotary_emb.cos_sin(positions, hidden_states.dtype)
        for layer in self.encoder.layer:
            hidden_states = layer(hidden_states, cos, sin, rows)
        return hidden_states

    def weight_target(self, name: str) -> WeightTarget:
        """A checkpoint name of any layout (prefix stripped) -> our parameter and its rows."""
        name = strip_prefix(name, self.weight_prefixes)
        for pattern, replacement in _RENAMES:
            name = pattern.sub(replacement, name)
        return super().weight_target(name)  # transformers' module names; the pooler and an MLM head skipped

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        lora: dict[str, dict[str, torch.Tensor]] = {}  # our parameter -> {"A": ..., "B": ...}
        loaded = load_weights_by_name(self, self._without_lora(weights, lora), self.weight_target)
        self._set_adapters(lora)
        return loaded

    def _without_lora(
        self, weights: Iterable[tuple[str, torch.Tensor]], lora: dict[str, dict[str, torch.Tensor]]
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """The checkpoint's tensors, the LoRA ones set aside in ``lora`` under the parameter they adapt."""
        for name, tensor in weights:
            match = LORA_TENSOR.match(name)
            if match is None:
                yield name, tensor
                continue
            target, rows = self.weight_target(f"{match[1]}.weight")
            if rows is not None:
                raise ValueError(f"Jina v3 LoRA tensor {name} adapts part of {target}, which wde cannot map")
            lora.setdefault(target, {})[match[2]] = tensor

    def _set_adapters(self, lora: dict[str, dict[str, torch.Tensor]]) -> None:
        """Every task's A and B beside the layer they adapt (``<layer>_lora``), B scaled by
        ``lora_alpha / lora_rank``; the adapter of a batch that names none: ``default_task``'s."""
        names = self.config.get("lora_adaptations") or []
        task = served_task(self.config)
        if not lora or not names:
            if task is not None:  # task_adapters() refuses it before load
                raise ValueError(
                    f"config.json names default_task {task!r} but the checkpoint has no LoRA weights "
                    "(parametrizations...lora_A / lora_B); remove default_task to serve the base weights"
                )
            return  # the base weights for every token
        params = dict(self.named_parameters())
        rank = int(self.config.get("lora_rank", 4))
        scaling = float(self.config.get("lora_alpha", 1.0)) / rank
        for name, pair in lora.items():
            if name not in params:
                continue  # a layer wde does not build (the pooler), as its weight
            layer_name = name.rsplit(".", 1)[0]
            adapters = self.get_submodule(f"{layer_name}_lora") if name.endswith(".weight") else None
            if not isinstance(adapters, (LinearLora, EmbeddingLora)) or set(pair) != {"A", "B"}:
                raise ValueError(
                    f"Jina v3 checkpoint has LoRA {sorted(pair)} for {name}, which needs both A and B of a "
                    "linear or embedding of the model; is the checkpoint complete?"
                )
            if pair["A"].shape[0] != len(names):
                raise ValueError(
                    f"Jina v3 LoRA of {name} stacks {pair['A'].shape[0]} tasks, but config.json's "
                    f"lora_adaptations names {len(names)}: {names}; does config.json match the weights?"
                )
            adapters.set_adapters(pair["A"], pair["B"], scaling, params[name])
        self.num_adapters = len(names)
        self.default_adapter = NO_ADAPTER if task is None else names.index(task)


class JinaEmbeddingsV3ForSequenceClassification(WdeModel):
    """Cross-encoder (transformers' ``JinaEmbeddingsV3ForSequenceClassification``): Jina v3 with its task
    adapters + RoBERTa's head (dense -> tanh -> out_proj on the first token) -> ``[num_seqs, num_labels]``."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.roberta = JinaEmbeddingsV3Model(config)
        self.classifier = ClassifierHead(config)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.roberta(input_ids, positions, token_type_ids)  # [num_tokens, hidden_size]

    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        return self.classifier(cls_pool(hidden_states, meta))  # [num_seqs, num_labels]

    def compile_blocks(self) -> None:
        self.roberta.compile_blocks()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """The encoder's tensors (and their LoRA) loaded by the encoder, the head's here."""
        head: list[tuple[str, torch.Tensor]] = []
        loaded = self.roberta.load_weights(self._encoder_weights(weights, head))
        loaded_head = load_weights_by_name(self.classifier, head, self._head_target)
        return {f"roberta.{name}" for name in loaded} | {f"classifier.{name}" for name in loaded_head}

    @staticmethod
    def _encoder_weights(
        weights: Iterable[tuple[str, torch.Tensor]], head: list[tuple[str, torch.Tensor]]
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """Every tensor but the head's, which are set aside in ``head``."""
        for name, tensor in weights:
            if name.startswith("classifier."):
                head.append((name, tensor))
            else:
                yield name, tensor

    @staticmethod
    def _head_target(name: str) -> WeightTarget:
        """``classifier.dense.weight`` (or its ``parametrizations.weight.original``) -> ``dense.weight``."""
        if LORA_TENSOR.match(name):
            raise ValueError(
                f"Jina v3 checkpoint has a LoRA tensor on its classification head ({name}); wde adapts the "
                "encoder only (as the remote code's LoRA wrapper does): merge the head's adapter into its "
                "weight before serving"
            )
        return _ORIGINAL.sub(".weight", name.removeprefix("classifier.")), None
