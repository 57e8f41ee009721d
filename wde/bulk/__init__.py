"""Bulk embedding: a whole file of texts into a directory of parquet parts, resumable (``wde embed``).

``wde.bulk.embed(input, output, ...)`` runs it in this process (or on Ray Data with ``use_ray=True``);
``wde.bulk.ray.WdeEmbedder`` is the Ray Data UDF for your own pipelines. Importing ``wde`` or this package
imports neither pyarrow (a core dependency) nor ray (``pip install 'wde[ray]'``): they load when a bulk job
runs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["embed"]


def __getattr__(name: str) -> Any:
    if name != "embed":
        raise AttributeError(f"module 'wde.bulk' has no attribute {name!r}")
    from wde.bulk.runner import embed

    return embed
