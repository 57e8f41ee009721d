"""wde: a prefill-only inference engine for text embeddings and rerank scores."""

from wde.engine.llm_engine import LLMEngine
from wde.engine_args import EngineArgs
from wde.entrypoints.llm import LLM
from wde.inputs import PoolingParams, TextPrompt, TokensPrompt
from wde.outputs import (
    CombinedEmbeddingOutput,
    EmbeddingOutput,
    ErrorOutput,
    MultiVectorOutput,
    SparseEmbeddingOutput,
)

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "CombinedEmbeddingOutput",
    "EmbeddingOutput",
    "EngineArgs",
    "ErrorOutput",
    "LLMEngine",
    "MultiVectorOutput",
    "PoolingParams",
    "SparseEmbeddingOutput",
    "TextPrompt",
    "TokensPrompt",
    "__version__",
]
