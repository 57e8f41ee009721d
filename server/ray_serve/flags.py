"""The ``wde serve`` flags of Ray Serve (imports no Ray: the parser is built for every ``wde`` call)."""

from __future__ import annotations

import argparse
from typing import Any


def add_ray_serve_flags(group: Any) -> None:
    group.add_argument(
        "--ray",
        action="store_true",
        help="serve through Ray Serve replicas (the cluster of RAY_ADDRESS, else a local one); "
        "pip install 'wde[ray]'",
    )
    group.add_argument("--num-replicas", type=_num_replicas, default=1, help="replicas: N, or auto")


def _num_replicas(raw: str) -> int | str:
    if raw == "auto":
        return raw
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive int or 'auto', got {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive int or 'auto', got {raw!r}")
    return value
