"""Jina Embeddings v3 on flat, unpadded batches (jinaai/jina-embeddings-v3): XLM-RoBERTa with RoPE instead
of a position table, and five LoRA task adapters.

GTE's blocks (``wde/models/gte.py``: packed qkv with biases -> RoPE -> attention, post-norm) with a plain
MLP ``fc2(gelu(fc1(x)))``, RoPE over whole heads (base 20,000), one token type.

The task adapter is chosen once, at load: ``default_task`` in config.json (sentence-transformers' name for
it: ``model_kwargs={"default_task": ...}``), one of ``lora_adaptations``; its LoRA is merged into the weights
(``W + lora_alpha / lora_rank * B @ A``). Without ``default_task`` no adapter applies, as the remote code
and sentence-transformers do without a task. A request's ``prompt_name`` picks the task's instruction prompt,
not its adapter (the engine's batch carries no per-request task to the model).

Two layouts, one set of parameters:

- published, for remote code (``"architectures": ["XLMRobertaModel"]`` or ``["XLMRobertaLoRA"]``,
  ``"model_type": "xlm-roberta"``, ``auto_map`` to jinaai/xlm-roberta-flash-implementation,
  ``rotary_emb_base``, ``lora_adaptations``): ``roberta.emb_ln``, ``roberta.encoder.layers.N.mixer.Wqkv``,
  ``mixer.out_proj``, ``mlp.fc1`` / ``fc2``, ``norm1`` / ``norm2``; every linear and embedding as
  ``<module>.parametrizations.weight.original`` with ``.parametrizations.weight.0.lora_A`` / ``lora_B``
  (``[num_tasks, rank, fan_in]`` / ``[num_tasks, fan_out, rank]``; an embedding's ``[num_tasks, num_rows,
  rank]`` / ``[num_tasks, rank, dim]``). wde never runs that code; ``registry.resolve_architecture`` routes
  such a config here, never to the plain XLM-R class.
- transformers' (``JinaEmbeddingsV3Model``, ``"model_type": "jina_embeddings_v3"``): saved under the
  published names without the LoRA (transformers reverses its conversion on save), or as its modules name
  them (``layers.N.self_attn.q_proj``, ``post_attention_layernorm``, ``post_mlp_layernorm``, ...).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from wde.layers.activation import get_act_fn
from wde.models.gte import BlockBiases, GteLayer, GteModel, GteRope, GteRotaryEmbedding, refuse_settings
from wde.models.nomic_bert import FLASH_BLOCK_RENAMES
from wde.models.weight_names import WeightTarget, load_weights_by_name, strip_prefix

DEFAULT_ROPE_THETA = 20_000.0  # transformers' JinaEmbeddingsV3Config and the published rotary_emb_base
WEIGHT_PREFIXES = ("roberta.",)
# the fields that mark a config.json published for the remote code as Jina's, not a plain XLM-R
JINA_MARKERS = ("lora_adaptations", "rotary_emb_base")
# published names -> GTE's (gte.py then maps transformers' module names and fuses their q / k / v)
_RENAMES = (
    (re.compile(r"\.parametrizations\.weight\.original$"), ".weight"),
    *FLASH_BLOCK_RENAMES,
    (re.compile(r"\.mixer\.Wqkv\."), ".attention.qkv_proj."),
    (re.compile(r"\.mixer\.out_proj\."), ".attention.o_proj."),
)
_LORA = re.compile(r"^(.*)\.parametrizations\.weight\.0\.lora_([AB])$")


# ---- config ------------------------------------------------------------------------------------------------
def is_jina_layout(config: dict[str, Any]) -> bool:
    """A config.json published for the remote code under XLM-R's names, with Jina's RoPE or adapters."""
    return config.get("position_embedding_type") == "rotary" or any(key in config for key in JINA_MARKERS)


def standard_config(config: dict[str, Any]) -> dict[str, Any]:
    """A published config with its RoPE base as transformers names it (``rope_parameters``); idempotent."""
    if "rope_parameters" in config or "rotary_emb_base" not in config:
        return config
    rope = {"rope_type": "default", "rope_theta": float(config["rotary_emb_base"])}
    return {**config, "rope_parameters": rope}


def served_task(config: dict[str, Any]) -> str | None:
    """The task adapter wde merges: ``default_task`` (None: the base weights)."""
    task = config.get("default_task")
    tasks = config.get("lora_adaptations") or []
    if task is not None and task not in tasks:
        raise ValueError(
            f"Jina v3 config.json names default_task {task!r}, which is not one of its lora_adaptations "
            f"{tasks}; set default_task to one of them, or remove it to serve the base weights"
        )
    return task


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


# ---- layers ------------------------------------------------------------------------------------------------
class JinaMLP(nn.Module):
    """``fc2(act(fc1(x)))`` (XLM-R's MLP under CLIP's names)."""

    def __init__(self, config: dict[str, Any], biases: BlockBiases) -> None:
        super().__init__()
        hidden_size, intermediate_size = config["hidden_size"], config["intermediate_size"]
        self.fc1 = nn.Linear(hidden_size, intermediate_size)
        self.act = get_act_fn(config.get("hidden_act", "gelu"))
        self.fc2 = nn.Linear(intermediate_size, hidden_size, bias=biases.down)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(hidden_states)))  # [num_tokens, hidden_size]


class JinaLayer(GteLayer):
    """GTE's post-norm block with the plain MLP."""

    mlp_cls = JinaMLP


# ---- model -------------------------------------------------------------------------------------------------
class JinaEmbeddingsV3Model(GteModel):
    """Embeddings + layers (the served task's adapter merged); returns the last hidden state
    ``[num_tokens, hidden_size]`` (mean pooling and normalize, as the sentence-transformers config says)."""

    weight_prefixes = WEIGHT_PREFIXES
    layer_cls = JinaLayer

    @classmethod
    def standard_config(cls, hf_config: dict[str, Any]) -> dict[str, Any]:
        return standard_config(hf_config)

    def check_config(self, config: dict[str, Any]) -> None:
        check_config(config)

    def block_biases(self, config: dict[str, Any]) -> BlockBiases:
        return BlockBiases(qkv=True, output=True, down=True)

    def make_rotary(self, config: dict[str, Any], head_size: int) -> GteRotaryEmbedding:
        theta = (config.get("rope_parameters") or {}).get("rope_theta", DEFAULT_ROPE_THETA)
        return GteRotaryEmbedding(head_size, GteRope(float(theta)))

    def weight_target(self, name: str) -> WeightTarget:
        """A checkpoint name of any layout (prefix stripped) -> our parameter and its rows."""
        name = strip_prefix(name, self.weight_prefixes)
        for pattern, replacement in _RENAMES:
            name = pattern.sub(replacement, name)
        return super().weight_target(name)  # transformers' module names; the pooler and an MLM head skipped

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        lora: dict[str, dict[str, torch.Tensor]] = {}  # our parameter -> {"A": ..., "B": ...}
        loaded = load_weights_by_name(self, self._without_lora(weights, lora), self.weight_target)
        task = served_task(self.config)
        if task is not None:
            self._merge_adapter(lora, self.config["lora_adaptations"].index(task), task)
        return loaded

    def _without_lora(
        self, weights: Iterable[tuple[str, torch.Tensor]], lora: dict[str, dict[str, torch.Tensor]]
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """The checkpoint's tensors, the LoRA ones set aside in ``lora`` under the parameter they adapt."""
        for name, tensor in weights:
            match = _LORA.match(name)
            if match is None:
                yield name, tensor
                continue
            target, rows = self.weight_target(f"{match[1]}.weight")
            if rows is not None:
                raise ValueError(f"Jina v3 LoRA tensor {name} adapts part of {target}, which wde cannot map")
            lora.setdefault(target, {})[match[2]] = tensor

    @torch.no_grad()
    def _merge_adapter(self, lora: dict[str, dict[str, torch.Tensor]], index: int, task: str) -> None:
        """``W += lora_alpha / lora_rank * delta`` for every adapted parameter, task ``index``'s delta."""
        if not lora:
            raise ValueError(
                f"config.json names default_task {task!r} but the checkpoint has no LoRA weights "
                "(parametrizations...lora_A / lora_B); remove default_task to serve the base weights"
            )
        params = dict(self.named_parameters())
        rank = int(self.config.get("lora_rank", 4))
        scaling = float(self.config.get("lora_alpha", 1.0)) / rank
        for name, pair in lora.items():
            if name not in params or set(pair) != {"A", "B"}:
                raise ValueError(
                    f"Jina v3 checkpoint has LoRA {sorted(pair)} for {name}, which needs both A and B of a "
                    "linear or embedding of the model; is the checkpoint complete?"
                )
            param, lora_a, lora_b = params[name], pair["A"][index], pair["B"][index]
            module = self.get_submodule(name.rsplit(".", 1)[0])
            # a linear's A [rank, fan_in], B [fan_out, rank]; an embedding's A [num_rows, rank], B [rank, dim]
            delta = lora_a @ lora_b if isinstance(module, nn.Embedding) else lora_b @ lora_a
            param.add_(delta.to(param) * scaling)
