"""``ReplicaPlan``: the Ray Serve deployment options of ``wde serve --ray``, derived from the flags, the
server's own limits and the cluster's resources (no Ray import: plain numbers, unit-testable).

Backpressure, from the inside out (docs/ray-serve.md):
  1. each replica runs the app, whose admission middleware answers 429 + Retry-After (our error shape) to
     requests beyond --max-concurrent-requests, at once;
  2. Ray sends a replica at most ``max_ongoing_requests`` (default 2 x --max-concurrent-requests + 8), so
     the replica's own 429 answers first, and cheap routes (/health, /metrics) still get through;
  3. while every replica is at that limit, Ray's proxy holds up to ``max_queued_requests`` (default: one
     replica's ``max_ongoing_requests``) and answers the rest 429 + Retry-After itself (the proxy
     middleware of ``proxy_errors.py`` gives it our error shape).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DEFAULT_APP_NAME = "wde"
HEADROOM = 8  # ongoing requests over 2 x --max-concurrent-requests that Ray may send one replica
MAX_DEFAULT_TARGET = 8.0  # autoscaling: the default target of ongoing requests per replica, at most
MAX_CONSTRUCTOR_RETRIES = 3  # the deploy fails after 3 failed replica starts (Ray: 20), not 20 loads


class RayServeUserError(ValueError):
    """A flag combination that cannot work on this cluster: ``wde serve`` exits 2 with its message."""


@dataclass(frozen=True)
class ReplicaPlan:
    app_name: str
    route_prefix: str
    num_replicas: int | None  # None: autoscaled (autoscaling_config)
    autoscaling_config: dict[str, Any] | None
    cpus_per_replica: float
    gpus_per_replica: float
    max_ongoing_requests: int
    max_queued_requests: int
    retry_after_seconds: int
    graceful_timeout: float

    def deployment_options(self) -> dict[str, Any]:
        """Keyword arguments of ``serve.deployment`` (backpressure_config is added by the caller: it is a
        Ray class)."""
        options: dict[str, Any] = {
            "name": "WdeServer",
            "ray_actor_options": {"num_cpus": self.cpus_per_replica, "num_gpus": self.gpus_per_replica},
            "max_ongoing_requests": self.max_ongoing_requests,
            "max_queued_requests": self.max_queued_requests,
            "graceful_shutdown_timeout_s": self.graceful_timeout,
            "max_constructor_retry_count": MAX_CONSTRUCTOR_RETRIES,
        }
        if self.autoscaling_config is not None:
            options["autoscaling_config"] = self.autoscaling_config
        else:
            options["num_replicas"] = self.num_replicas
        return options

    def describe(self) -> str:
        if self.autoscaling_config is not None:
            config = self.autoscaling_config
            replicas = f"{config['min_replicas']}-{config['max_replicas']} replicas (auto)"
        else:
            replicas = f"{self.num_replicas} replica{'s' if self.num_replicas != 1 else ''}"
        gpus = f", {self.gpus_per_replica:g} GPUs" if self.gpus_per_replica else ""
        return (
            f"{replicas} x {self.cpus_per_replica:g} CPUs{gpus}; max_ongoing_requests "
            f"{self.max_ongoing_requests}, max_queued_requests {self.max_queued_requests}"
        )


def plan_replicas(args: Any, cluster_cpus: float, cluster_gpus: float, joined: bool) -> ReplicaPlan:
    """The plan for the parsed ``wde serve`` flags ``args`` on a cluster of ``cluster_cpus`` CPUs.
    Raises RayServeUserError when the replicas cannot fit (on a cluster this process started; a joined
    cluster may autoscale, so there it is the caller's warning)."""
    concurrent = args.max_concurrent_requests
    max_ongoing = args.max_ongoing_requests or 2 * concurrent + HEADROOM
    max_queued = args.max_queued_requests or max_ongoing
    gpus = _gpus_per_replica(args, cluster_gpus)
    if args.num_replicas == "auto":
        cpus = args.cpus_per_replica or (
            max(1.0, math.floor(cluster_cpus / args.max_replicas)) if args.max_replicas else 1.0
        )
        max_replicas = args.max_replicas or max(1, int(cluster_cpus // cpus))
        if args.min_replicas > max_replicas:
            raise RayServeUserError(
                f"--min-replicas {args.min_replicas} is more than --max-replicas {max_replicas}; lower it"
            )
        target = args.target_ongoing_requests or max(1.0, min(MAX_DEFAULT_TARGET, concurrent // 2))
        autoscaling: dict[str, Any] | None = {
            "min_replicas": args.min_replicas,
            "initial_replicas": args.min_replicas,
            "max_replicas": max_replicas,
            "target_ongoing_requests": target,
        }
        num_replicas, needed = None, args.min_replicas
    else:
        cpus = args.cpus_per_replica or max(1.0, math.floor(cluster_cpus / args.num_replicas))
        autoscaling, num_replicas, needed = None, args.num_replicas, args.num_replicas
    if not joined and needed * cpus > cluster_cpus:
        raise RayServeUserError(
            f"{needed} replicas x {cpus:g} CPUs do not fit the local Ray cluster's {cluster_cpus:g} CPUs; "
            "lower --num-replicas / --min-replicas or --cpus-per-replica, or join a larger cluster "
            "(RAY_ADDRESS=HEAD:6379)"
        )
    return ReplicaPlan(
        app_name=args.app_name or _app_name(args.route_prefix),
        route_prefix=args.route_prefix,
        num_replicas=num_replicas,
        autoscaling_config=autoscaling,
        cpus_per_replica=cpus,
        gpus_per_replica=gpus,
        max_ongoing_requests=max_ongoing,
        max_queued_requests=max_queued,
        retry_after_seconds=args.retry_after_seconds,
        graceful_timeout=args.graceful_timeout,
    )


def torch_threads(cpus_per_replica: float) -> int:
    """The torch threads of a replica that reserves ``cpus_per_replica`` CPUs (at least 1)."""
    return max(1, int(cpus_per_replica))


def _gpus_per_replica(args: Any, cluster_gpus: float) -> float:
    if args.gpus_per_replica is not None:
        return args.gpus_per_replica
    device = getattr(args, "device", "auto")
    return 1.0 if device == "cuda" or (device == "auto" and cluster_gpus >= 1) else 0.0


def _app_name(route_prefix: str) -> str:
    if route_prefix == "/":
        return DEFAULT_APP_NAME
    return f"{DEFAULT_APP_NAME}-" + route_prefix.strip("/").replace("/", "-")
