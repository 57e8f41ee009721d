"""ColBERT-style late interaction as sentence-transformers' ``MultiVectorEncoder`` saves it (Transformer ->
token ``Dense`` -> ``MultiVectorMask`` -> ``Normalize``): token vectors against ``encode_query`` /
``encode_document``, MaxSim scores against ``similarity``, on held-out real text, with a tiny random BERT
(the bundled MiniLM vocabulary) and the installed sentence-transformers.

Tolerances (float32 on CPU, same weights): token vectors within ``ATOL`` = 1e-4 (the issue's bound), MaxSim
scores within 1e-4 relative to their size.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np
import pytest
import torch

import wde
from tests.tiny_models import SEED, save_tiny_bert, training_texts
from wde.outputs import MultiVectorOutput

ATOL = 1e-4
NUM_TEXTS = 12
VECTOR_SIZE = 16


def save_colbert(
    path: Path, hf_dir: Path, prompts: dict[str, str] | None = None, skiplist: bool = False, **lengths: int
) -> Path:
    """A MultiVectorEncoder over ``hf_dir`` with a VECTOR_SIZE projection, saved by sentence-transformers."""
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    transformer = Transformer(str(hf_dir), **lengths)
    dimension = transformer.get_embedding_dimension()
    dense = Dense(
        dimension,
        VECTOR_SIZE,
        bias=False,
        activation_function=None,
        module_input_name="token_embeddings",
        module_output_name="token_embeddings",
    )
    mask = MultiVectorMask(skiplist_words=list(string.punctuation) if skiplist else None)
    normalize = Normalize(module_input_name="token_embeddings", module_output_name="token_embeddings")
    modules = [transformer, dense, mask, normalize]
    MultiVectorEncoder(modules=modules, device="cpu", prompts=prompts).save(str(path))
    return path


@pytest.fixture(scope="module")
def texts() -> list[str]:
    corpus = training_texts()
    return [*corpus[:NUM_TEXTS], " ".join(corpus[NUM_TEXTS : NUM_TEXTS + 4])]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert-colbert"), seed=SEED + 95)


@pytest.fixture(scope="module")
def colbert_dir(bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_colbert(tmp_path_factory.mktemp("colbert") / "model", bert_dir)


def reference(path: Path, texts: list[str], side: str) -> list[np.ndarray]:
    from sentence_transformers import MultiVectorEncoder

    model = MultiVectorEncoder(str(path), device="cpu")
    encode = model.encode_query if side == "query" else model.encode_document
    return [vectors.numpy() for vectors in encode(texts)]


def assert_same_vectors(got: list[MultiVectorOutput], expected: list[np.ndarray]) -> float:
    worst = 0.0
    for position, (output, vectors) in enumerate(zip(got, expected, strict=True)):
        assert isinstance(output, MultiVectorOutput)
        assert output.vectors.shape == vectors.shape, (
            f"text {position}: {output.vectors.shape} vs {vectors.shape}"
        )
        worst = max(worst, float(np.abs(output.vectors - vectors).max()))
    assert worst <= ATOL, f"max abs diff {worst:.2e}"
    return worst


def test_token_vectors_equal_multi_vector_encoder(colbert_dir: Path, texts: list[str]) -> None:
    llm = wde.LLM(str(colbert_dir), device="cpu")
    assert llm.model_config.outputs == ("multi_vector",)
    documents = assert_same_vectors(llm.encode(texts), reference(colbert_dir, texts, "document"))
    queries = assert_same_vectors(
        llm.encode(texts, input_type="query"), reference(colbert_dir, texts, "query")
    )
    print(f"max abs diff vs MultiVectorEncoder: documents {documents:.2e}, queries {queries:.2e}")


def test_maxsim_scores_equal_similarity(colbert_dir: Path, texts: list[str]) -> None:
    from sentence_transformers import MultiVectorEncoder

    model = MultiVectorEncoder(str(colbert_dir), device="cpu")
    query, documents = texts[0][:60], texts[1:8]
    expected = model.similarity(model.encode_query([query]), model.encode_document(documents)).numpy()[0]
    llm = wde.LLM(str(colbert_dir), device="cpu")
    scores = np.array([output.score for output in llm.score(query, documents)])
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4)
    ranked = llm.rerank(query, documents)
    assert [result.index for result in ranked] == list(np.argsort(-expected, kind="stable"))


def test_prompts_lengths_and_skiplist(bert_dir: Path, tmp_path: Path, texts: list[str]) -> None:
    """Query / document prompts, query_length / document_length caps and a punctuation skiplist on the
    document side, as MultiVectorEncoder applies them."""
    path = save_colbert(
        tmp_path / "model",
        bert_dir,
        prompts={"query": "query: ", "document": "passage: "},
        skiplist=True,
        query_length=12,
        document_length=40,
    )
    config = json.loads((path / "sentence_bert_config.json").read_text())
    assert config.get("query_length") == 12 and config.get("document_length") == 40
    llm = wde.LLM(str(path), device="cpu")
    assert llm.model_config.multi_vector.skiplist_ids  # punctuation ids of the MiniLM vocabulary
    assert_same_vectors(llm.encode(texts, input_type="document"), reference(path, texts, "document"))
    assert_same_vectors(llm.encode(texts, input_type="query"), reference(path, texts, "query"))


@pytest.mark.parametrize(
    "expansion",
    [
        {"strategy": "fixed", "attend": False, "length": 24},  # classic ColBERT / PyLate
        {"strategy": "fixed", "attend": True, "length": 24},
        {"strategy": "min", "attend": False, "length": 24},
    ],
    ids=["fixed-hidden", "fixed-attended", "min-hidden"],
)
@pytest.mark.parametrize("backend", ["torch_sdpa", "naive"])
def test_query_expansion_equals_multi_vector_encoder(
    bert_dir: Path, tmp_path: Path, texts: list[str], expansion: dict, backend: str
) -> None:
    """Queries padded with [MASK] up to the expansion length (cut to it first when fixed); with attend=False
    the other tokens do not attend to them, yet their vectors are scored, as MultiVectorEncoder does."""
    path = save_colbert(tmp_path / "model", bert_dir, query_expansion=expansion)
    llm = wde.LLM(str(path), device="cpu", attention_backend=backend)
    got = llm.encode(texts, input_type="query")
    assert all(
        len(output.vectors) >= expansion["length"] or expansion["strategy"] == "fixed" for output in got
    )
    if expansion["strategy"] == "fixed":
        assert all(len(output.vectors) == expansion["length"] for output in got)
    assert_same_vectors(got, reference(path, texts, "query"))
    assert_same_vectors(llm.encode(texts, input_type="document"), reference(path, texts, "document"))


def test_hidden_expansion_needs_a_backend_that_hides_keys(bert_dir: Path, tmp_path: Path) -> None:
    from wde.layers.attention.backends.flash_attn import FlashAttnBackend

    with pytest.raises(ValueError, match="--attention-backend torch_sdpa"):
        FlashAttnBackend.build_metadata([4, 3], torch.device("cpu"), num_keys=[2, 3])


def test_batch_equals_single(colbert_dir: Path, texts: list[str]) -> None:
    llm = wde.LLM(str(colbert_dir), device="cpu")
    batch = llm.encode(texts, input_type="query")
    for text, output in zip(texts, batch, strict=True):
        alone = llm.encode(text, input_type="query")[0]
        np.testing.assert_allclose(output.vectors, alone.vectors, atol=1e-5)


def save_pylate_colbert(path: Path, hf_dir: Path, **config: object) -> Path:
    """A ColBERT folder in PyLate <= 3's layout, written by hand (PyLate itself is not installed): the BERT
    checkpoint, a pylate Dense (no module names, no bias), PyLate's keys in config_sentence_transformers."""
    import shutil

    from safetensors.torch import save_file

    shutil.copytree(hf_dir, path)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
    ]
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "1_Dense").mkdir()
    dense_config = {
        "in_features": 32,
        "out_features": VECTOR_SIZE,
        "bias": False,
        "activation_function": "torch.nn.modules.linear.Identity",
        "use_residual": False,
    }
    (path / "1_Dense" / "config.json").write_text(json.dumps(dense_config))
    generator = torch.Generator().manual_seed(SEED + 99)
    save_file(
        {"linear.weight": torch.randn(VECTOR_SIZE, 32, generator=generator) * 0.2},
        path / "1_Dense" / "model.safetensors",
    )
    (path / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 60, "do_lower_case": False})
    )
    st_config = {
        "model_type": "ColBERT",
        "query_prefix": "[unused0]",
        "document_prefix": "[unused1]",
        "query_length": 24,
        "document_length": 60,
        "attend_to_expansion_tokens": False,
        "similarity_fn_name": "MaxSim",
        **config,
    }
    (path / "config_sentence_transformers.json").write_text(json.dumps(st_config))
    return path


@pytest.mark.parametrize(
    "config",
    [{}, {"do_query_expansion": False, "skiplist_words": ["the", "a"]}],
    ids=["pylate-defaults", "no-expansion-own-skiplist"],
)
def test_pylate_colbert_folder_equals_multi_vector_encoder(
    bert_dir: Path, tmp_path: Path, texts: list[str], config: dict
) -> None:
    """[unused0] / [unused1] prefixes kept whole (registered as special tokens), [MASK] expansion to
    query_length unattended, documents cut at document_length without punctuation: as MultiVectorEncoder
    converts a PyLate save."""
    path = save_pylate_colbert(tmp_path / "pylate", bert_dir, **config)
    llm = wde.LLM(str(path), device="cpu")
    assert llm.model_config.added_special_tokens == ("[unused0]", "[unused1]")
    queries = llm.encode(texts, input_type="query")
    assert_same_vectors(queries, reference(path, texts, "query"))
    assert_same_vectors(llm.encode(texts, input_type="document"), reference(path, texts, "document"))
    tokens = llm.engine.tokenizer.untruncated().encode("[unused0]what is debian").tokens
    assert tokens[:3] == ["[CLS]", "[unused0]", "what"]
