"""Scoring helpers: pairing rules (1:N, N:N), rerank checks, ranking with ties and top_n, Cohere's token cap,
cosine / sparse / MaxSim plans against numpy written out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from tests.unit.engine.conftest import make_model_config
from wde.entrypoints.scoring import (
    CosinePlan,
    MaxSimPlan,
    cap_document_tokens,
    make_pairs,
    maxsim,
    needs_token_cap,
    rank,
    rerank_documents,
    sparse_dot,
)
from wde.outputs import EmbeddingOutput, MultiVectorOutput, ScoreOutput, SparseEmbeddingOutput


def test_pairs_one_to_many_and_pairwise() -> None:
    assert make_pairs("q", ["a", "b"]) == [("q", "a"), ("q", "b")]
    assert make_pairs(["q1", "q2"], ["a", "b"]) == [("q1", "a"), ("q2", "b")]
    with pytest.raises(ValueError, match="text_1 has 2 texts and text_2 has 3"):
        make_pairs(["q1", "q2"], ["a", "b", "c"])
    with pytest.raises(TypeError, match=r"text_2\[1\]: expected a str, got int"):
        make_pairs("q", ["a", 1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="text_2 is empty"):
        make_pairs("q", [])


def test_rerank_checks_top_n_and_labels() -> None:
    config = make_model_config()
    assert rerank_documents("q", ["a", "b"], 1, config) == ["a", "b"]
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="top_n must be a positive int"):
            rerank_documents("q", ["a"], bad, config)  # type: ignore[arg-type]
    config.task = "score"
    config.hf_config["id2label"] = {"0": "a", "1": "b", "2": "c"}
    with pytest.raises(ValueError, match="this model has 3 labels"):
        rerank_documents("q", ["a"], None, config)


def test_rank_sorts_highest_first_ties_in_document_order() -> None:
    scores = [ScoreOutput(str(i), np.array([s], np.float32), 1) for i, s in enumerate([0.5, 0.9, 0.5, 0.1])]
    ranked = rank(scores, ["a", "b", "c", "d"], top_n=3, return_documents=False)
    assert [(r.index, r.document) for r in ranked] == [(1, None), (0, None), (2, None)]
    assert [r.document for r in rank(scores, ["a", "b", "c", "d"], None, True)] == ["b", "a", "c", "d"]


def test_token_cap_cuts_by_character_offsets() -> None:
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    assert not needs_token_cap(None, 16) and not needs_token_cap(16, 16) and needs_token_cap(3, 16)
    with pytest.raises(ValueError, match="max_tokens_per_doc must be a positive int"):
        needs_token_cap(0, 16)
    assert cap_document_tokens(tokenizer, ["one two three four", "short"], 2) == ["one two", "short"]


def test_cosine_plan_embeds_each_text_once() -> None:
    plan = CosinePlan.from_pairs([("q", "a"), ("q", "b"), ("a", "q")])
    assert plan.texts == ["q", "a", "b"] and plan.pair_rows == [(0, 1), (0, 2), (1, 0)]
    vectors = np.eye(3, dtype=np.float32)
    vectors[2] = [0.6, 0.8, 0.0]
    embeddings = [EmbeddingOutput(str(i), vectors[i], 2) for i in range(3)]
    scores = plan.scores(embeddings, ["0", "1", "2"])
    assert [float(s.score) for s in scores] == pytest.approx([0.0, 0.6, 0.0])
    assert scores[0].num_tokens == 4


def test_sparse_dot_and_cosine() -> None:
    a = SparseEmbeddingOutput("a", np.array([1, 5, 9]), np.array([1.0, 2.0, 3.0], np.float32), 3)
    b = SparseEmbeddingOutput("b", np.array([5, 9, 12]), np.array([4.0, 0.5, 7.0], np.float32), 3)
    assert sparse_dot(a, b) == pytest.approx(2 * 4 + 3 * 0.5)
    plan = CosinePlan.from_pairs([("a", "b")])
    (cosine,) = plan.sparse_scores([a, b], ["0"], "cosine")
    expected = 9.5 / (np.linalg.norm([1, 2, 3]) * np.linalg.norm([4, 0.5, 7]))
    assert cosine.score == pytest.approx(expected, rel=1e-6)


def test_maxsim_against_numpy() -> None:
    rng = np.random.default_rng(0)
    query, document = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    expected = sum(max(float(q @ d) for d in document) for q in query)
    assert maxsim(query, document) == pytest.approx(expected, rel=1e-5)
    assert maxsim(query, document, mean=True) == pytest.approx(expected / 3, rel=1e-5)
    assert maxsim(query[:0], document) == 0.0
    plan = MaxSimPlan.from_pairs([("q", "d"), ("q", "e")])
    assert plan.queries == ["q"] and plan.documents == ["d", "e"]
    queries = [MultiVectorOutput("q", query.astype(np.float32), 3)]
    documents = [MultiVectorOutput(n, document.astype(np.float32), 5) for n in ("d", "e")]
    scores = plan.scores(queries, documents, ["0", "1"], "maxsim")
    assert [s.score for s in scores] == pytest.approx([expected, expected], rel=1e-5)
