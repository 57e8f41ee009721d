"""``WdeEmbedder``: a Ray Data UDF (a callable class) that holds one ``wde.LLM`` per actor and adds the
embedding of each row's text to its batch. Use it in your own pipelines::

    import ray
    from wde.bulk.ray import WdeEmbedder

    ds = ray.data.read_parquet("s3://bucket/docs/")
    ds = ds.map_batches(
        WdeEmbedder,
        fn_constructor_kwargs={"model": "/models/bge-small", "text_column": "body"},
        batch_size=256,
        concurrency=4,  # actors, each with its own engine
        num_cpus=4,  # per actor: torch uses that many threads
    )
    ds.write_parquet("s3://bucket/embeddings/")

Nothing here imports ray: the class is plain Python, and Ray runs it.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class WdeEmbedder:
    """``__call__`` takes a numpy batch (``{column: np.ndarray}``) and returns it with ``embedding_column``
    (``[num_rows, dim]`` float32) and ``num_tokens`` (``[num_rows]`` int32) added. Constructor keyword
    arguments other than the column names and the encode options are ``wde.LLM`` engine arguments."""

    def __init__(
        self,
        model: str | None = None,
        *,
        text_column: str = "text",
        embedding_column: str = "embedding",
        dimensions: int | None = None,
        normalize: bool | None = None,
        prompt_name: str | None = None,
        **engine_args: Any,
    ) -> None:
        from wde import LLM

        self.llm = LLM(model, **engine_args)
        self.text_column = text_column
        self.embedding_column = embedding_column
        self.dimensions, self.normalize, self.prompt_name = dimensions, normalize, prompt_name
        self._dim: int | None = None

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        texts = batch[self.text_column].tolist()
        outputs = self._encode(texts) if texts else []
        if outputs:
            embeddings = np.stack([dense_embedding(output) for output in outputs])  # [num_rows, dim]
            self._dim = embeddings.shape[1]
        else:  # an empty batch (a filter upstream can leave one)
            embeddings = np.zeros((0, self.dim), dtype=np.float32)
        batch[self.embedding_column] = embeddings
        batch["num_tokens"] = np.array([output.num_tokens for output in outputs], dtype=np.int32)
        return batch

    @property
    def dim(self) -> int:
        """The embedding size (the first call tells it; before that, one empty text is embedded)."""
        if self._dim is None:
            self._dim = dense_embedding(self._encode([""])[0]).shape[0]
        return self._dim

    def _encode(self, texts: list[str]) -> list[Any]:
        return self.llm.encode(
            texts,
            output="dense",
            dimensions=self.dimensions,
            normalize=self.normalize,
            prompt_name=self.prompt_name,
        )


def dense_embedding(output: Any) -> np.ndarray:
    """The vector of one ``encode(..., output="dense")`` output ([dim])."""
    embedding = getattr(output, "embedding", None)
    if not isinstance(embedding, np.ndarray):
        raise TypeError(f"expected a dense embedding output, got {type(output).__name__}")
    return embedding
