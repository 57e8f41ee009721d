"""Cross-encoders (tiny random BERT / XLM-R sequence classifiers) against transformers and CrossEncoder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import wde
from tests.tiny_models import BERT_MAX_POSITIONS, SEED, reference_logits, save_tiny_bert, save_tiny_xlmr

LOGITS_ATOL = 1e-5  # float32, ours vs transformers
MAX_LEN = BERT_MAX_POSITIONS  # both tiny models have 64 usable positions

QUERIES = ["what is a file carver", "mail server virus scanning", "rust hash crate"]
DOCS = [
    "scalpel is a fast file carver that reads a database of header and footer definitions.",
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "This package contains the source for the Rust universal-hash crate.",
    "x",
    # longer than 64 tokens together with any query: exercises pair truncation
    " ".join(["the package provides libraries, documentation and command line tools"] * 12),
]


@pytest.fixture(scope="module")
def bert_ce_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(
        tmp_path_factory.mktemp("tiny-bert-ce"),
        seed=SEED + 10,
        architecture="BertForSequenceClassification",
        num_labels=1,
    )


@pytest.fixture(scope="module")
def bert_ce3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(
        tmp_path_factory.mktemp("tiny-bert-ce3"),
        seed=SEED + 11,
        architecture="BertForSequenceClassification",
        num_labels=3,
    )


@pytest.fixture(scope="module")
def xlmr_ce_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_xlmr(
        tmp_path_factory.mktemp("tiny-xlmr-ce"),
        seed=SEED + 12,
        architecture="XLMRobertaForSequenceClassification",
        num_labels=1,
    )


@pytest.fixture(scope="module", params=["bert", "xlmr"])
def ce_dir(request: pytest.FixtureRequest, bert_ce_dir: Path, xlmr_ce_dir: Path) -> Path:
    return {"bert": bert_ce_dir, "xlmr": xlmr_ce_dir}[request.param]


def all_pairs() -> list[tuple[str, str]]:
    return [(query, doc) for query in QUERIES for doc in DOCS]


def hf_logits(path: Path, pairs: list[tuple[str, str]], truncation: str = "longest_first") -> np.ndarray:
    return reference_logits(path, pairs, MAX_LEN, truncation)


def scores_of(outputs: list[wde.outputs.ScoreOutput]) -> np.ndarray:
    return np.stack([out.scores for out in outputs])


def test_logits_and_activated_scores_match_transformers_and_cross_encoder(ce_dir: Path) -> None:
    from sentence_transformers import CrossEncoder

    pairs = all_pairs()
    reference_logits = hf_logits(ce_dir, pairs)  # [num_pairs, 1]
    llm = wde.LLM(str(ce_dir))
    assert llm.model_config.task == "score" and llm.model_config.max_model_len == MAX_LEN
    logits = scores_of(llm.score([a for a, _ in pairs], [b for _, b in pairs], raw_scores=True))
    assert np.abs(logits - reference_logits).max() <= LOGITS_ATOL

    cross_encoder = CrossEncoder(str(ce_dir), device="cpu", max_length=MAX_LEN)
    expected = cross_encoder.predict(pairs, convert_to_numpy=True)
    scores = np.array([out.score for out in llm.score([a for a, _ in pairs], [b for _, b in pairs])])
    assert np.abs(scores - expected).max() <= LOGITS_ATOL
    assert np.abs(scores - 1 / (1 + np.exp(-reference_logits[:, 0]))).max() <= LOGITS_ATOL


def test_truncated_pairs_have_max_model_len_tokens(bert_ce_dir: Path) -> None:
    llm = wde.LLM(str(bert_ce_dir))
    outputs = llm.score(QUERIES[0], DOCS)
    assert outputs[-1].num_tokens == MAX_LEN
    with pytest.raises(
        ValueError, match=r"inputs\[4\]: input has \d+ tokens, more than max_model_len \(64\)"
    ):
        llm.score(QUERIES[0], DOCS, truncate=False)
    assert len(llm.score(QUERIES[0], DOCS[:2], truncate=False)) == 2  # engine still usable


def test_only_second_truncation_matches_transformers(bert_ce_dir: Path) -> None:
    long_queries = [" ".join([query] * 9) for query in QUERIES]  # >= 36 tokens: longest_first cuts them
    pairs = [(query, DOCS[-1]) for query in long_queries]
    reference = hf_logits(bert_ce_dir, pairs, truncation="only_second")
    llm = wde.LLM(str(bert_ce_dir), pair_truncation="only_second")
    logits = scores_of(llm.score(long_queries, [DOCS[-1]] * 3, raw_scores=True))
    assert np.abs(logits - reference).max() <= LOGITS_ATOL
    assert np.abs(reference - hf_logits(bert_ce_dir, pairs)).max() > 1e-3  # the strategies differ here
    # a query that alone exceeds max_model_len cannot be cut with only_second: that pair fails alone
    with pytest.raises(ValueError, match=r"inputs\[1\]: the tokenizer refused this input"):
        llm.score(["short", "word " * 100], ["doc", "doc"])


def test_rerank_orders_like_the_reference_and_keeps_indices(ce_dir: Path) -> None:
    llm = wde.LLM(str(ce_dir))
    for query in QUERIES:
        reference = hf_logits(ce_dir, [(query, doc) for doc in DOCS])[:, 0]
        expected_order = sorted(range(len(DOCS)), key=lambda i: -reference[i])
        results = llm.rerank(query, DOCS)
        assert [r.index for r in results] == expected_order
        assert all(r.document is None for r in results)
        assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
        top = llm.rerank(query, DOCS, top_n=2, return_documents=True)
        assert [r.index for r in top] == expected_order[:2]
        assert [r.document for r in top] == [DOCS[i] for i in expected_order[:2]]
        raw = llm.rerank(query, DOCS, raw_scores=True)
        assert (
            np.abs(np.array([r.score for r in raw]) - reference[[r.index for r in raw]]).max() <= LOGITS_ATOL
        )


def test_batch_equals_single(bert_ce_dir: Path) -> None:
    llm = wde.LLM(str(bert_ce_dir))
    pairs = all_pairs()
    batched = scores_of(llm.score([a for a, _ in pairs], [b for _, b in pairs]))
    singles = np.stack([llm.score(a, b)[0].scores for a, b in pairs])
    assert np.abs(batched - singles).max() <= LOGITS_ATOL


def test_multi_label_returns_all_logits(bert_ce3_dir: Path) -> None:
    pairs = all_pairs()[:6]
    reference = hf_logits(bert_ce3_dir, pairs)  # [6, 3]
    llm = wde.LLM(str(bert_ce3_dir))
    assert llm.model_config.score_activation == "identity"  # CrossEncoder's default for several labels
    outputs = llm.score([a for a, _ in pairs], [b for _, b in pairs])
    assert np.abs(scores_of(outputs) - reference).max() <= LOGITS_ATOL
    with pytest.raises(ValueError, match=r"the model has 3 labels; read \.scores"):
        _ = outputs[0].score
    with pytest.raises(
        ValueError, match="rerank needs one relevance score per pair; this model has 3 labels"
    ):
        llm.rerank("q", ["a", "b"])
    softmax_llm = wde.LLM(str(bert_ce3_dir), score_activation="softmax")
    probs = scores_of(softmax_llm.score([a for a, _ in pairs], [b for _, b in pairs]))
    expected = np.exp(reference) / np.exp(reference).sum(1, keepdims=True)
    assert np.abs(probs - expected).max() <= LOGITS_ATOL


def test_task_mismatch_errors_name_the_supported_tasks(bert_ce_dir: Path, default_llm: wde.LLM) -> None:
    llm = wde.LLM(str(bert_ce_dir))
    with pytest.raises(
        ValueError, match=r"serves task 'score', not 'encode': it scores .*\(LLM.score, LLM.rerank"
    ):
        llm.encode("hello")
    with pytest.raises(ValueError, match=r"serves task 'embed', not 'classify'"):
        default_llm.classify("hello")
    # a cross-encoder classifies single texts and pairs with its head
    classified = llm.classify(["hello", ("a query", "a document")], raw_scores=True)
    assert len(classified) == 2 and classified[1].scores.shape == (1,)
    with pytest.raises(ValueError, match=r"embedding model.*raw_scores needs a cross-encoder"):
        default_llm.score("a", "b", raw_scores=True)
    with pytest.raises(ValueError, match="task 'embed' is not supported by BertForSequenceClassification"):
        wde.LLM(str(bert_ce_dir), task="embed")


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda llm: llm.rerank("q", []), ValueError, "documents is empty"),
        (lambda llm: llm.rerank(["q"], ["a"]), TypeError, "query must be a str, got list"),
        (lambda llm: llm.rerank(None, ["a"]), TypeError, "query must be a str, got NoneType"),
        (lambda llm: llm.rerank("q", ["a", 3]), TypeError, r"documents\[1\]: expected a str, got int"),
        (lambda llm: llm.rerank("q", ["a"], top_n=0), ValueError, "top_n must be a positive int"),
        (
            lambda llm: llm.score(["a", "b"], ["c", "d", "e"]),
            ValueError,
            "text_1 has 2 texts and text_2 has 3",
        ),
        (lambda llm: llm.score("a", []), ValueError, "text_2 is empty"),
        (lambda llm: llm.score(5, "a"), TypeError, "text_1 must be a str or a list of str, got int"),
    ],
)
def test_bad_score_input_raises_and_engine_stays_usable(bert_ce_dir: Path, call, error, message) -> None:
    llm = _cached_llm(bert_ce_dir)
    with pytest.raises(error, match=message):
        call(llm)
    assert not llm.engine.has_unfinished_requests()
    assert len(llm.rerank("q", ["a", "b"])) == 2


_LLMS: dict[Path, wde.LLM] = {}


def _cached_llm(path: Path) -> wde.LLM:
    if path not in _LLMS:
        _LLMS[path] = wde.LLM(str(path))
    return _LLMS[path]
