"""``LlmReranker``: how a decoder scores a (query, document) pair with task "score": the text the pair
becomes, and the tokens whose last-position logits score it (``ModelEntry.reranker``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LlmReranker:
    pair_template: str
    """The text a pair becomes (``str.format`` with instruction=, query=, document=)."""

    score_tokens: tuple[str, ...]
    """The tokens whose last-position logits score a pair (e.g. ("no", "yes")); their ids go into the config
    the model is built from (``score_token_ids``)."""

    default_instruction: str
    """The template's {instruction} unless the engine or a request names one."""


# Qwen3-Reranker's prompt (model card): system + user turns, then an assistant turn with an empty think block;
# the answer's first token is "yes" or "no": sigmoid(logit("yes") - logit("no")) is the model card's score.
QWEN3_RERANKER_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
    'Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
    "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"
    "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
)
QWEN3_RERANKER_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
QWEN3_RERANKER = LlmReranker(QWEN3_RERANKER_TEMPLATE, ("no", "yes"), QWEN3_RERANKER_INSTRUCTION)
