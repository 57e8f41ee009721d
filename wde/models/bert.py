"""BERT encoder on flat, unpadded batches: every linear layer sees ``[num_tokens, hidden]``; only the
attention backend knows where one sequence ends and the next begins. Each attention layer is built from
its ``AttentionSpec`` (bidirectional, all heads); the runner binds the backend after load."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from wde.config import num_labels
from wde.layers.activation import get_act_fn
from wde.layers.attention.layer import Attention
from wde.layers.attention.spec import AttentionSpec
from wde.layers.pooler.methods import PoolingMetadata, cls_pool
from wde.layers.quantization.int8_linear import compile_options
from wde.models.block_compile import compile_each
from wde.models.interface import WdeModel
from wde.models.weight_names import WeightTarget, bert_target, load_named_weights, load_weights_by_name


class BertEmbeddings(nn.Module):
    def __init__(self, config: dict[str, Any], position_offset: int = 0) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        self.word_embeddings = nn.Embedding(config["vocab_size"], hidden_size)
        self.position_embeddings = nn.Embedding(config["max_position_embeddings"], hidden_size)
        self.token_type_embeddings = nn.Embedding(config.get("type_vocab_size", 2), hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=config.get("layer_norm_eps", 1e-12))
        # XLM-RoBERTa numbers positions from padding_idx + 1.
        self.position_offset = position_offset
        position_type = config.get("position_embedding_type", "absolute")
        if position_type != "absolute":
            raise ValueError(f"position_embedding_type {position_type!r} is not supported (only 'absolute')")

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> torch.Tensor:
        embeddings = self.word_embeddings(input_ids)  # [num_tokens, hidden_size]
        embeddings = embeddings + self.position_embeddings(positions + self.position_offset)
        if token_type_ids is None:
            embeddings = embeddings + self.token_type_embeddings.weight[0]
        else:
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(embeddings)


class BertSelfOutput(nn.Module):
    """dense -> residual add -> LayerNorm (used after attention and after the MLP)."""

    def __init__(self, input_size: int, hidden_size: int, layer_norm_eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(input_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(hidden_states) + residual)


class BertAttention(nn.Module):
    """The fused QKV projection, the attention op and the output projection + residual + LayerNorm, which
    ``BertLayer.forward`` calls in turn (no forward of its own: see there why)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        self.num_heads = config["num_attention_heads"]
        self.head_size = hidden_size // self.num_heads  # BERT has no head_dim: hidden splits evenly
        self.qkv_proj = nn.Linear(hidden_size, 3 * hidden_size)  # fused query/key/value
        self.attn = Attention(AttentionSpec(num_heads=self.num_heads, head_size=self.head_size))
        self.output = BertSelfOutput(hidden_size, hidden_size, config.get("layer_norm_eps", 1e-12))

    def project(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[num_tokens, hidden_size] -> q, k, v [num_tokens, num_heads, head_size]: one GEMM's output"""
        num_tokens = hidden_states.shape[0]
        qkv = self.qkv_proj(hidden_states)  # [num_tokens, 3 * hidden_size]
        q, k, v = qkv.view(num_tokens, 3, self.num_heads, self.head_size).unbind(1)
        return q, k, v


class BertLayer(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size, intermediate_size = config["hidden_size"], config["intermediate_size"]
        self.attention = BertAttention(config)
        self.intermediate = nn.Linear(hidden_size, intermediate_size)
        self.act_fn = get_act_fn(config.get("hidden_act", "gelu"))
        self.output = BertSelfOutput(intermediate_size, hidden_size, config.get("layer_norm_eps", 1e-12))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # BertAttention's steps are called here, not through a forward of its own: a compiled layer breaks
        # its graph once, at the attention op, and all that follows it (output projection, residual +
        # LayerNorm, the MLP: with int8, each linear's input quantization too) is one graph that inductor
        # fuses across, instead of a graph per frame left by the break
        attention = self.attention
        attn_out = attention.attn(*attention.project(hidden_states))  # [num_tokens, num_heads, head_size]
        attn_out = attention.output(attn_out.reshape(hidden_states.shape[0], -1), hidden_states)
        return self.mlp(attn_out)  # [num_tokens, hidden_size]

    def mlp(self, attn_out: torch.Tensor) -> torch.Tensor:
        """intermediate -> activation -> output dense -> residual + LayerNorm (what torch.compile fuses)."""
        mlp_hidden = self.act_fn(self.intermediate(attn_out))  # [num_tokens, intermediate_size]
        return self.output(mlp_hidden, attn_out)  # [num_tokens, hidden_size]


class BertEncoder(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config["num_hidden_layers"]))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            hidden_states = layer(hidden_states)
        return hidden_states


class BertPooler(nn.Module):
    """BERT's pooler: dense + tanh on the first token's state (used by the classifier head)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, first_token_states: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(first_token_states))


class BertModel(WdeModel):
    """Embeddings + encoder; returns the last hidden state ``[num_tokens, hidden_size]``."""

    # Checkpoint prefixes of the encoder, stripped on load ("bert.encoder..." -> "encoder...").
    weight_prefixes = ("bert.", "model.")

    def __init__(self, config: dict[str, Any], add_pooler: bool = False) -> None:
        super().__init__(config)
        self.embeddings = self._make_embeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config["hidden_size"]) if add_pooler else None

    def _make_embeddings(self, config: dict[str, Any]) -> BertEmbeddings:
        return BertEmbeddings(config)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.encoder(self.embeddings(input_ids, positions, token_type_ids))

    def compile_blocks(self) -> None:
        """torch.compile each whole layer with dynamic token counts: the attention op stays eager (it is
        excluded from compiling: its per-batch grouping is data-dependent), everything around it fuses (the
        QKV projection; the output projection + residual + LayerNorm + MLP, and with int8 weights the
        quantization of each linear's input into the op before it)."""
        compile_each(self.encoder.layer, "forward", compile_options)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy HF-named tensors in (fusing query/key/value); returns the parameter names loaded."""
        return load_named_weights(self, weights, self.weight_prefixes, self.config["hidden_size"])


class BertForSequenceClassification(WdeModel):
    """Cross-encoder: BERT + pooler (dense, tanh on [CLS]) + classifier -> ``[num_seqs, num_labels]``."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.bert = BertModel(config, add_pooler=True)
        self.classifier = nn.Linear(config["hidden_size"], num_labels(config))

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.bert(input_ids, positions, token_type_ids)

    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        first_token_states = cls_pool(hidden_states, meta)  # [num_seqs, hidden_size]
        assert self.bert.pooler is not None  # built with add_pooler=True
        return self.classifier(self.bert.pooler(first_token_states))  # [num_seqs, num_labels]

    def compile_blocks(self) -> None:
        self.bert.compile_blocks()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_named_weights(self, weights, (), self.config["hidden_size"])


class MaskedLMHead(nn.Module):
    """A masked-LM head (BERT's, DistilBERT's): dense -> activation -> LayerNorm -> decoder to the
    vocabulary + a bias per token. The decoder's weight is the word-embedding table when ``tied`` (the
    checkpoint then stores none, or a copy)."""

    def __init__(
        self, hidden_size: int, act: str, layer_norm_eps: float, word_embeddings: nn.Embedding, tied: bool
    ) -> None:
        super().__init__()
        vocab_size = word_embeddings.num_embeddings
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.act_fn = get_act_fn(act)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.tied = tied
        # a tied decoder reads the embedding table (a list keeps it out of this module's parameters)
        self._word_embeddings = [word_embeddings]
        self.decoder = None if tied else nn.Linear(hidden_size, vocab_size, bias=False)
        self.bias = nn.Parameter(torch.empty(vocab_size))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        transformed = self.LayerNorm(self.act_fn(self.dense(hidden_states)))  # [num_tokens, hidden_size]
        weight = self._word_embeddings[0].weight if self.decoder is None else self.decoder.weight
        return nn.functional.linear(transformed, weight, self.bias)  # [num_tokens, vocab_size]


class BertForMaskedLM(WdeModel):
    """BERT + its masked-LM head: SPLADE sparse vectors (the head runs only when sparse output is asked for,
    on the pooler's token chunks), or pooled dense vectors of the encoder."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.bert = BertModel(config)
        self.mlm_head = MaskedLMHead(
            config["hidden_size"],
            config.get("hidden_act", "gelu"),
            config.get("layer_norm_eps", 1e-12),
            self.bert.embeddings.word_embeddings,
            tied=config.get("tie_word_embeddings", True),
        )

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.bert(input_ids, positions, token_type_ids)  # [num_tokens, hidden_size]

    def compute_mlm_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.mlm_head(hidden_states)  # [num_tokens, vocab_size]

    def compile_blocks(self) -> None:
        self.bert.compile_blocks()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        target = bert_target((), self.config["hidden_size"])
        return load_weights_by_name(self, weights, lambda name: _mlm_head_target(target(name), self.mlm_head))


# transformers' names of the masked-LM head -> ours (``cls.predictions.decoder.bias`` is the same tensor as
# ``cls.predictions.bias``: either fills our bias)
_MLM_HEAD_NAMES = {
    "cls.predictions.transform.dense.weight": "mlm_head.dense.weight",
    "cls.predictions.transform.dense.bias": "mlm_head.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "mlm_head.LayerNorm.weight",
    "cls.predictions.transform.LayerNorm.bias": "mlm_head.LayerNorm.bias",
    "cls.predictions.bias": "mlm_head.bias",
    "cls.predictions.decoder.bias": "mlm_head.bias",
    "cls.predictions.decoder.weight": "mlm_head.decoder.weight",
}


def _mlm_head_target(mapped: WeightTarget, head: MaskedLMHead) -> WeightTarget | None:
    name, rows = mapped
    if name not in _MLM_HEAD_NAMES:
        return mapped
    if name == "cls.predictions.decoder.weight" and head.tied:
        return None  # a copy of the word embeddings that some checkpoints store
    return _MLM_HEAD_NAMES[name], rows
