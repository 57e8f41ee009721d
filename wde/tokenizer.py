"""A thin wrapper over a HuggingFace fast tokenizer (``tokenizers``): batched, truncating, never padding."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import tokenizers

if TYPE_CHECKING:
    from wde.config import ModelConfig

TextInput = str | tuple[str, str]
# Token ids: a list (this tokenizer's, or cut and extended by the RequestProcessor) or a 1-D integer array
# (a view of a call's checked ids, or of a tokenizer process's output): a batch concatenates arrays and
# walks lists.
TokenIds = list[int] | np.ndarray
TRUNCATION_DIRECTIONS = ("right", "left")  # which end of an over-long input is cut (left: keep the end)
# At most this many texts are encoded one by one on the calling thread, without waking tokenizers' thread
# pool (a server's steps of one text each). On the H200 machine (16 cores, 2026-11-27) wde serve answered
# 30% fewer one-text requests/s with that pool than with TOKENIZERS_PARALLELISM=false; this alone did not
# win it back (docs/benchmarks.md, "The host path on a GPU"): the rest is issue 37's.
MAX_SERIAL_INPUTS = 4
MAX_TRUNCATION_VARIANTS = 8  # tokenizer copies kept for per-request lengths / left truncation (LRU)


@dataclass(frozen=True)
class Truncation:
    """How one request's inputs are cut: to ``max_length`` tokens (special tokens included), from the
    ``direction`` end ("left" keeps the end of the input, as TEI's ``truncation_direction: Left``)."""

    max_length: int
    direction: str = "right"


@dataclass
class TokenizedInput:
    token_ids: TokenIds
    token_type_ids: TokenIds | None  # None: a single text, all segment 0
    truncated: bool


class Tokenizer:
    """Encodes texts or text pairs in one batched call, truncating to ``max_length``.

    ``pair_truncation`` is transformers' strategy for pairs: ``longest_first`` (the default, as in
    ``tokenizer(a, b, truncation=True)``) or ``only_second`` (the query is kept whole).
    """

    def __init__(
        self, backend: tokenizers.Tokenizer, max_length: int, pair_truncation: str = "longest_first"
    ) -> None:
        self.backend = backend
        self.max_length = max_length
        self.pair_truncation = pair_truncation
        # tokenizer.json files often carry a fixed padding/truncation from training: replace both.
        self.backend.no_padding()
        self.backend.enable_truncation(max_length=max_length, strategy=pair_truncation)
        self.num_encode_calls = 0
        probe = self.backend.encode("a b", add_special_tokens=True)
        self._single_is_segment_zero = not any(probe.type_ids)
        self._untruncated: tokenizers.Tokenizer | None = None
        self._variants: OrderedDict[Truncation, tokenizers.Tokenizer] = OrderedDict()
        self._variants_lock = threading.Lock()  # the tokenizer threads share the copies
        # where from_pretrained loaded it from, and the special tokens it added (a tokenizer process loads
        # the same); None for one built from a tokenizers object
        self.source: tuple[Path, tuple[str, ...]] | None = None

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        max_length: int,
        pair_truncation: str = "longest_first",
        special_tokens: tuple[str, ...] = (),
    ) -> Tokenizer:
        """The folder's fast tokenizer; ``special_tokens`` are added as special (never split, never
        normalized)."""
        tokenizer = cls._load(Path(path), max_length, pair_truncation)
        tokenizer.source = (Path(path), tuple(special_tokens))
        if special_tokens:
            tokenizer.backend.add_special_tokens(
                [tokenizers.AddedToken(token, special=True, normalized=False) for token in special_tokens]
            )
        return tokenizer

    @classmethod
    def of_model(cls, model_config: ModelConfig) -> Tokenizer:
        """The engine's tokenizer for ``model_config``: cut at max_model_len, its pair truncation and the
        special tokens it adds (the engine, an API worker and the calibration pass all tokenize so)."""
        return cls.from_pretrained(
            model_config.tokenizer,
            model_config.max_model_len,
            model_config.pair_truncation,
            model_config.added_special_tokens,
        )

    @classmethod
    def _load(cls, path: Path, max_length: int, pair_truncation: str) -> Tokenizer:
        tokenizer_file = path / "tokenizer.json"
        if tokenizer_file.exists():
            return cls(tokenizers.Tokenizer.from_file(str(tokenizer_file)), max_length, pair_truncation)
        try:
            from transformers import AutoTokenizer
        except ImportError as e:
            raise FileNotFoundError(
                f"{path} has no tokenizer.json; install transformers (pip install transformers) to convert "
                "its slow tokenizer files, or save a fast tokenizer there"
            ) from e
        hf_tokenizer = AutoTokenizer.from_pretrained(str(path), use_fast=True)
        if not getattr(hf_tokenizer, "is_fast", False):
            raise ValueError(f"the tokenizer in {path} has no fast (Rust) version; wde needs one")
        return cls(hf_tokenizer.backend_tokenizer, max_length, pair_truncation)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode_batch(
        self, inputs: list[TextInput], truncation: Truncation | None = None
    ) -> list[TokenizedInput]:
        """One call for the whole window; special tokens added as the model expects. ``truncation``: another
        length or direction than (max_length, "right"); a pair loses tokens on that side of each text, as
        the tokenizer's strategy shares them. Raises when one input cannot be truncated as asked
        (only_second with a first text longer than the length)."""
        self.num_encode_calls += 1
        backend = self.backend if truncation is None else self._variant(truncation)
        max_length = self.max_length if truncation is None else truncation.max_length
        if len(inputs) <= MAX_SERIAL_INPUTS:  # no hand-over to tokenizers' threads for a few texts
            encodings = [_encode_one(backend, text) for text in inputs]
        else:
            encodings = backend.encode_batch_fast(inputs, add_special_tokens=True)
        tokenized = []
        for encoding, text in zip(encodings, inputs, strict=True):
            token_ids = encoding.ids
            # a single text is all segment 0 for most tokenizers: no type-id list to build then (the batch
            # reads None as zeros)
            is_pair = isinstance(text, tuple)
            type_ids = encoding.type_ids if is_pair or not self._single_is_segment_zero else None
            truncated = len(token_ids) >= max_length and self._was_truncated(encoding, text, max_length)
            tokenized.append(TokenizedInput(token_ids, type_ids, truncated))
        return tokenized

    def _was_truncated(self, encoding: tokenizers.Encoding, text: TextInput, max_length: int) -> bool:
        """Whether truncation cut ``text`` (``encode_batch`` asks only of encodings that reach ``max_length``:
        a cut one always does). tokenizers
        reports the cut tokens in ``overflowing``, but 0.23.2 leaves it empty for some byte-level BPE inputs
        (a Qwen tokenizer: 13 tokens cut to 10, nothing overflowing; 0.23.3 fills it): an encoding that
        ends at ``max_length`` with nothing overflowing is counted again without truncation."""
        if encoding.overflowing:
            return True
        return len(encoding.ids) >= max_length and self.count_tokens(text) > max_length

    def _variant(self, truncation: Truncation) -> tokenizers.Tokenizer:
        """A copy truncating as ``truncation`` says (the engine's own for the default); the last few kept."""
        if truncation == Truncation(self.max_length):
            return self.backend
        with self._variants_lock:
            return self._kept_variant(truncation)

    def _kept_variant(self, truncation: Truncation) -> tokenizers.Tokenizer:
        variant = self._variants.pop(truncation, None)
        if variant is None:
            if truncation.direction not in TRUNCATION_DIRECTIONS:
                raise ValueError(
                    f"truncation direction {truncation.direction!r} is not one of {TRUNCATION_DIRECTIONS}"
                )
            variant = tokenizers.Tokenizer.from_str(self.backend.to_str())
            variant.enable_truncation(
                max_length=truncation.max_length,
                strategy=self.pair_truncation,
                direction=truncation.direction,
            )
            if len(self._variants) >= MAX_TRUNCATION_VARIANTS:
                self._variants.popitem(last=False)
        self._variants[truncation] = variant
        return variant

    def untruncated(self) -> tokenizers.Tokenizer:
        """A copy that neither truncates nor pads (for /tokenize and error messages); built once."""
        if self._untruncated is None:
            copy = tokenizers.Tokenizer.from_str(self.backend.to_str())
            copy.no_truncation()
            copy.no_padding()
            self._untruncated = copy
        return self._untruncated

    def count_tokens(self, text: TextInput) -> int:
        """Length without truncation (to word the error for an over-long input, and to check a cut that
        tokenizers did not report: ``_was_truncated``)."""
        if isinstance(text, tuple):
            return len(self.untruncated().encode(*text).ids)
        return len(self.untruncated().encode(text).ids)


def _encode_one(backend: tokenizers.Tokenizer, text: TextInput) -> tokenizers.Encoding:
    if isinstance(text, tuple):
        return backend.encode(*text, add_special_tokens=True)
    return backend.encode(text, add_special_tokens=True)


def special_token_ids(path: str | Path, names: tuple[str, ...]) -> list[int]:
    """The ids of the tokenizer's named special tokens ("cls_token", "eos_token", ...) that it has, from
    ``tokenizer_config.json`` / ``special_tokens_map.json``, as transformers' ``tokenizer.cls_token_id`` ...
    resolve them."""
    path = Path(path)
    named: dict[str, str] = {}
    for file_name in ("special_tokens_map.json", "tokenizer_config.json"):
        file = path / file_name
        if file.is_file():
            config = json.loads(file.read_text(encoding="utf-8"))
            for name in names:
                value = config.get(name)
                content = value.get("content") if isinstance(value, dict) else value
                if isinstance(content, str):
                    named.setdefault(name, content)
    vocabulary = Tokenizer.from_pretrained(path, max_length=1).backend
    ids = (vocabulary.token_to_id(named[name]) for name in names if name in named)
    return [token_id for token_id in ids if token_id is not None]


def token_ids_of_words(path: str | Path, words: list[str]) -> list[int]:
    """The ids of the words that are single tokens of the tokenizer's vocabulary (others are skipped, as
    sentence-transformers' MultiVectorMask drops skiplist words that resolve to the unknown token)."""
    vocabulary = Tokenizer.from_pretrained(path, max_length=1).backend
    ids = (vocabulary.token_to_id(word) for word in words)
    return [token_id for token_id in ids if token_id is not None]


def tokens_to_keep_whole(path: str | Path, prefixes: list[str]) -> tuple[str, ...]:
    """Of a PyLate ColBERT's prefixes, those the vocabulary has (whole, or their first word) but the
    tokenizer splits into pieces: registered as special tokens, as sentence-transformers does."""
    backend = Tokenizer.from_pretrained(path, max_length=1).backend
    vocabulary = backend.get_vocab(with_added_tokens=True)
    keep: list[str] = []
    for value in prefixes:
        for prefix in (value, *value.split(None, 1)[:1]):
            if prefix not in vocabulary:
                continue
            if backend.encode(prefix, add_special_tokens=False).tokens != [prefix]:
                keep.append(prefix)
            break
    return tuple(keep)
