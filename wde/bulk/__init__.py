"""Bulk embedding: a whole file of texts into a directory of parquet parts, resumable (``wde embed``).

``wde.bulk.embed(input, output, ...)`` runs it in this process (or on Ray Data with ``use_ray=True``);
``wde.bulk.ray.WdeEmbedder`` is the Ray Data UDF for your own pipelines. Importing ``wde`` or this package
imports neither pyarrow nor ray: they load when a bulk job runs (``pip install 'wde[bulk]'``, and
``'wde[ray]'`` for Ray).
"""

from __future__ import annotations

from typing import Any

__all__ = ["embed"]

MISSING_EXTRA = "{name} is not installed: pip install 'wde[{extra}]' (wde embed{flag} needs it)"


def __getattr__(name: str) -> Any:
    if name != "embed":
        raise AttributeError(f"module 'wde.bulk' has no attribute {name!r}")
    require("pyarrow", "bulk")
    from wde.bulk.runner import embed

    return embed


def require(module: str, extra: str) -> None:
    """Raise ModuleNotFoundError naming the extra to install when ``module`` is missing."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        flag = " --ray" if extra == "ray" else ""
        raise ModuleNotFoundError(MISSING_EXTRA.format(name=module, extra=extra, flag=flag), name=module)
