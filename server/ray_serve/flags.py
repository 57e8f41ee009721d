"""The ``wde serve`` flags of Ray Serve (imports no Ray: the parser is built for every ``wde`` call).

Unset limits are derived from the server's own (``server/ray_serve/options.py``): see docs/ray-serve.md.
"""

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
    group.add_argument(
        "--num-replicas",
        type=_num_replicas,
        default=1,
        help="replicas (one engine each): N, or auto (autoscaled on ongoing requests between "
        "--min-replicas and --max-replicas)",
    )
    group.add_argument(
        "--cpus-per-replica",
        type=_positive_float,
        default=None,
        help="CPUs each replica reserves, and its torch threads (default: the cluster's CPUs / N; "
        "with auto: the cluster's CPUs / --max-replicas, else 1)",
    )
    group.add_argument(
        "--gpus-per-replica",
        type=_non_negative_float,
        default=None,
        help="GPUs each replica reserves (default: 1 with --device cuda, or auto on a cluster with GPUs)",
    )
    group.add_argument("--min-replicas", type=_positive_int, default=1, help="auto: the fewest replicas")
    group.add_argument(
        "--max-replicas",
        type=_positive_int,
        default=None,
        help="auto: the most replicas (default: the cluster's CPUs / --cpus-per-replica)",
    )
    group.add_argument(
        "--target-ongoing-requests",
        type=_positive_float,
        default=None,
        help="auto: the ongoing requests per replica the autoscaler aims at (default: "
        "--max-concurrent-requests / 2, at most 8)",
    )
    group.add_argument(
        "--max-ongoing-requests",
        type=_positive_int,
        default=None,
        help="Ray's limit of requests sent to one replica at once (default: 2 x --max-concurrent-requests "
        "+ 8, so the replica's own 429 answers first)",
    )
    group.add_argument(
        "--max-queued-requests",
        type=_positive_int,
        default=None,
        help="requests Ray's proxy holds while every replica is at --max-ongoing-requests; more are "
        "answered 429 + Retry-After (default: --max-ongoing-requests)",
    )
    group.add_argument(
        "--route-prefix",
        type=_route_prefix,
        default="/",
        help="the URL prefix of this model on the Serve proxy (several models on one cluster: one "
        "wde serve --ray per model, each with its own prefix)",
    )
    group.add_argument(
        "--app-name",
        default=None,
        help="the Serve application's name (default: wde, or wde-<prefix> with --route-prefix)",
    )


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


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive int, got {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive int, got {raw!r}")
    return value


def _positive_float(raw: str) -> float:
    value = _non_negative_float(raw)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {raw!r}")
    return value


def _non_negative_float(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {raw!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {raw!r}")
    return value


def _route_prefix(raw: str) -> str:
    if not raw.startswith("/") or (raw != "/" and raw.endswith("/")) or "//" in raw:
        raise argparse.ArgumentTypeError(f"expected a path like / or /minilm (no trailing /), got {raw!r}")
    return raw
