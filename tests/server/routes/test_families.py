"""Every supported family behind the HTTP server: the engine loads its tiny checkpoint from a local folder,
``GET /info`` reports the architecture and the pooling (or the classifier labels), and the family's routes
answer 200 with one result per input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.models.test_deberta_v2 import save_tiny_deberta_v2
from tests.models.test_distilbert import save_tiny_distilbert
from tests.models.test_mpnet import save_tiny_mpnet
from tests.models.tiny_gemma3 import save_tiny_gemma3
from tests.models.tiny_modernbert import save_tiny_modernbert
from tests.models.tiny_qwen3 import save_tiny_qwen3
from tests.server.conftest import served_model
from tests.tiny_models import save_tiny_bert, save_tiny_xlmr

pytestmark = pytest.mark.anyio

TEXTS = ["a short text", "a somewhat longer text about Debian packages and their descriptions", "x"]

# architecture -> (how to write its tiny checkpoint, the model_type key /info reports, its pooling / labels)
FAMILIES: dict[str, tuple[Callable[[Path], Path], str, str]] = {
    "BertModel": (lambda p: save_tiny_bert(p), "embedding", "cls"),
    "XLMRobertaModel": (lambda p: save_tiny_xlmr(p), "embedding", "cls"),
    "MPNetModel": (lambda p: save_tiny_mpnet(p, 3, "MPNetModel", 64), "embedding", "cls"),
    "DistilBertModel": (lambda p: save_tiny_distilbert(p, 3, "DistilBertModel"), "embedding", "cls"),
    "ModernBertModel": (lambda p: save_tiny_modernbert(p, 3), "embedding", "cls"),
    "Qwen3Model": (lambda p: save_tiny_qwen3(p, 3), "embedding", "last_token"),
    "Gemma3TextModel": (lambda p: save_tiny_gemma3(p, 3), "embedding", "cls"),
    "DebertaV2ForSequenceClassification": (
        lambda p: save_tiny_deberta_v2(p, 3, "DebertaV2ForSequenceClassification", 64, num_labels=1),
        "reranker",
        "LABEL_0",
    ),
    "ModernBertForSequenceClassification": (
        lambda p: save_tiny_modernbert(p, 3, "ModernBertForSequenceClassification", num_labels=1),
        "reranker",
        "LABEL_0",
    ),
}


@pytest.mark.parametrize("architecture", list(FAMILIES))
async def test_family_is_served(tmp_path: Path, architecture: str) -> None:
    save, model_type, detail = FAMILIES[architecture]
    async with served_model(save(tmp_path / "model")) as client:
        info = (await client.get("/info")).json()
        assert info["model_architecture"] == architecture
        assert set(info["model_type"]) == {model_type}
        if model_type == "embedding":
            assert info["model_type"]["embedding"]["pooling"] == detail
            response = await client.post("/embed", json={"inputs": TEXTS})
            assert response.status_code == 200, response.text
            assert len(response.json()) == len(TEXTS)
        else:
            assert detail in info["model_type"][model_type]["label2id"]
            response = await client.post("/rerank", json={"query": "a query", "texts": TEXTS})
            assert response.status_code == 200, response.text
            assert sorted(rank["index"] for rank in response.json()) == [0, 1, 2]
