"""wde: a prefill-only inference engine for text embeddings and rerank scores."""

from wde.engine.llm import LLM
from wde.engine.llm_engine import LLMEngine
from wde.engine_args import EngineArgs
from wde.inputs import PoolingParams, TextPrompt, TokensPrompt
from wde.outputs import EmbeddingOutput, ErrorOutput, SparseEmbeddingOutput

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "EmbeddingOutput",
    "EngineArgs",
    "ErrorOutput",
    "LLMEngine",
    "PoolingParams",
    "SparseEmbeddingOutput",
    "TextPrompt",
    "TokensPrompt",
    "__version__",
]
