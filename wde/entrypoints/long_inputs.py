"""Inputs longer than max_model_len: cut ("truncate", the default), refused ("error"), or run in windows and
aggregated ("chunk").

Embeddings: a text's token ids (the prompt's included, special tokens left out) are cut into windows of
``max_model_len`` minus the model's special tokens, each window overlapping the previous one by ``overlap``
tokens; each window gets the special tokens back and runs as an ordinary sequence (windows of one request
batch with each other and with other requests). The text's embedding is the token-count-weighted mean of its
windows' embeddings, before Matryoshka truncation and normalization::

    e = sum_i n_i * e_i / sum_i n_i      (e_i: window i's pooled embedding, unnormalized; n_i: its tokens)
    e = normalize(e[:dimensions])        (as the model or the request asks)

A text that fits runs as one window, so its embedding is the usual one.

The cost of one call is bounded as for every other input: each text (or document) at most
``MAX_INPUT_CHARS`` characters, checked before it is tokenized, and the call's windows together at most
``long_input_max_windows`` (``--long-input-max-windows``); past either, a ValueError (HTTP 422) names the
limit.

Rerank and score: the document is cut into windows of whole tokens (by their character offsets) so that
the query, the document window and the pair's special tokens (or the LLM reranker's template) fit; each
window is scored with the query as its own pair, and the document's score is the windows' maximum (or
their mean, or the first window's: ``chunk_score``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tokenizers

from wde.config import CHUNK_SCORE_NAMES, LONG_INPUT_MODE_NAMES, ModelConfig
from wde.engine.input_processor import MAX_INPUT_CHARS
from wde.inputs import PoolingParams, TokensPrompt
from wde.outputs import EmbeddingOutput, ScoreOutput

__all__ = ["CHUNK_SCORE_NAMES", "Chunker", "aggregate_embeddings", "aggregate_scores", "long_input_mode"]


def long_input_mode(params: PoolingParams, model_config: ModelConfig) -> str:
    """The request's mode: its ``long_input``, else its ``truncate`` (True: truncate, False: error), else
    the engine's default."""
    if params.long_input is not None:
        if params.long_input not in LONG_INPUT_MODE_NAMES:
            raise ValueError(
                f"long_input {params.long_input!r} is not one of {', '.join(LONG_INPUT_MODE_NAMES)}"
            )
        return params.long_input
    if params.truncate is not None:
        if not isinstance(params.truncate, bool):
            raise TypeError(f"truncate must be a bool, got {type(params.truncate).__name__}")
        return "truncate" if params.truncate else "error"
    return model_config.long_input


@dataclass
class SpecialTokens:
    """The ids a single text gets around its own (``[CLS] ... [SEP]``, ``<s> ... </s>``, ``... <eos>``)."""

    prefix: list[int]
    suffix: list[int]

    @classmethod
    def probe(cls, tokenizer: tokenizers.Tokenizer) -> SpecialTokens:
        content = tokenizer.encode("probe", add_special_tokens=False).ids
        full = tokenizer.encode("probe", add_special_tokens=True).ids
        for start in range(len(full) - len(content) + 1):
            if full[start : start + len(content)] == content:
                return cls(full[:start], full[start + len(content) :])
        raise ValueError("cannot find where the tokenizer's special tokens go around a text")

    @property
    def count(self) -> int:
        return len(self.prefix) + len(self.suffix)


def windows(ids: Sequence[int], size: int, overlap: int) -> list[list[int]]:
    """``ids`` cut into windows of at most ``size``, each starting ``size - overlap`` after the previous."""
    if size < 1 or not 0 <= overlap < size:
        raise ValueError(f"windows of {size} tokens need an overlap between 0 and {size - 1}, got {overlap}")
    step = size - overlap
    starts = range(0, max(len(ids) - overlap, 1), step)
    return [list(ids[start : start + size]) for start in starts]


def num_windows(num_ids: int, size: int, overlap: int) -> int:
    """``len(windows(ids, size, overlap))`` for ``num_ids`` ids, without making them."""
    return len(range(0, max(num_ids - overlap, 1), size - overlap))


def check_num_chars(where: str, text: str) -> None:
    """The per-text character limit of every input (``InputProcessor``'s), before any tokenizer work."""
    if len(text) > MAX_INPUT_CHARS:
        raise ValueError(
            f"{where}: text has {len(text)} characters, more than the limit of {MAX_INPUT_CHARS} (long_input "
            "'chunk' included); split the text"
        )


class Chunker:
    """Cuts long inputs into windows for one engine (its untruncated tokenizer, max_model_len, overlap)."""

    def __init__(self, tokenizer: tokenizers.Tokenizer, model_config: ModelConfig) -> None:
        self.tokenizer = tokenizer
        self.model_config = model_config

    @functools.cached_property
    def special(self) -> SpecialTokens:
        return SpecialTokens.probe(self.tokenizer)

    @property
    def overlap(self) -> int:
        return self.model_config.long_input_overlap

    def check_num_windows(self, num_windows: int) -> None:
        """Refuse a call cut into more than ``long_input_max_windows`` windows."""
        limit = self.model_config.long_input_max_windows
        if num_windows > limit:
            raise ValueError(
                f"inputs: long_input 'chunk' cuts this request into {num_windows} windows of at most "
                f"{self.model_config.max_model_len} tokens, more than the limit of {limit} "
                "(--long-input-max-windows); split the request or raise the limit"
            )

    # ---- embeddings -------------------------------------------------------------------------------------
    def text_windows(self, texts: Sequence[str], prompt: str) -> tuple[list[TokensPrompt], list[int]]:
        """Every text's windows as token-id prompts (special tokens included), and the text of each."""
        size = self.model_config.max_model_len - self.special.count
        for position, text in enumerate(texts):
            check_num_chars(f"inputs[{position}]", text)
        encodings = self.tokenizer.encode_batch([prompt + text for text in texts], add_special_tokens=False)
        self.check_num_windows(
            sum(num_windows(len(encoding.ids), size, self.overlap) for encoding in encodings)
        )
        prompts: list[TokensPrompt] = []
        owners: list[int] = []
        for owner, encoding in enumerate(encodings):
            for window in windows(encoding.ids, size, self.overlap):
                prompts.append({"prompt_token_ids": [*self.special.prefix, *window, *self.special.suffix]})
                owners.append(owner)
        return prompts, owners

    # ---- rerank / score -----------------------------------------------------------------------------------
    def document_windows(self, query: str, document: str, pair_overhead: int) -> list[str]:
        """The document cut at token boundaries into texts that fit beside ``query`` (``pair_overhead``: the
        tokens of the pair with an empty document)."""
        size = self.model_config.max_model_len - pair_overhead
        if size < 1:
            raise ValueError(
                f"the query alone takes {pair_overhead} of the {self.model_config.max_model_len} tokens; "
                "shorten it to chunk the documents"
            )
        check_num_chars("documents", document)
        encoding = self.tokenizer.encode(document, add_special_tokens=False)
        self.check_num_windows(num_windows(len(encoding.ids), size, self.overlap))
        if len(encoding.ids) <= size:
            return [document]
        offsets = encoding.offsets
        texts = []
        for window in windows(range(len(offsets)), size, self.overlap):
            texts.append(document[offsets[window[0]][0] : offsets[window[-1]][1]])
        return texts


def aggregate_embeddings(
    outputs: Sequence[EmbeddingOutput],
    owners: Sequence[int],
    num_texts: int,
    dimensions: int | None,
    normalize: bool,
) -> list[EmbeddingOutput]:
    """Per text, the token-count-weighted mean of its windows' unnormalized embeddings, then Matryoshka
    truncation and normalization (the module docstring's formula)."""
    sums: dict[int, np.ndarray] = {}  # text -> sum of n_i * e_i, float64 [hidden_size]
    counts = [0] * num_texts
    first: dict[int, EmbeddingOutput] = {}  # each text's first window: its request id and metrics
    for output, owner in zip(outputs, owners, strict=True):
        weighted = output.embedding.astype(np.float64) * output.num_tokens
        sums[owner] = sums[owner] + weighted if owner in sums else weighted
        counts[owner] += output.num_tokens
        first.setdefault(owner, output)
    results = []
    for owner in range(num_texts):
        vector = (sums[owner] / counts[owner])[:dimensions]
        if normalize:
            vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
        results.append(
            EmbeddingOutput(
                first[owner].request_id, vector.astype(np.float32), counts[owner], first[owner].metrics
            )
        )
    return results


def aggregate_scores(
    outputs: Sequence[ScoreOutput], owners: Sequence[int], num_pairs: int, how: str
) -> list[ScoreOutput]:
    """Per pair, its windows' scores combined by ``how`` (max, mean, first); tokens are summed."""
    grouped: list[list[ScoreOutput]] = [[] for _ in range(num_pairs)]
    for output, owner in zip(outputs, owners, strict=True):
        grouped[owner].append(output)
    results = []
    for index, group in enumerate(grouped):
        scores = np.stack([output.scores for output in group])  # [num_windows, num_labels]
        if how == "max":
            combined = scores.max(axis=0)
        elif how == "mean":
            combined = scores.mean(axis=0)
        else:
            combined = scores[0]
        num_tokens = sum(output.num_tokens for output in group)
        results.append(ScoreOutput(str(index), combined.astype(np.float32), num_tokens, group[0].metrics))
    return results
