"""``serve_on_ray(args, build_app)``: ``wde serve --ray``, the same FastAPI app behind Ray Serve replicas.

  1. join the Ray cluster of RAY_ADDRESS, else start a local one (``ray.init(address="local")``);
  2. plan the replicas (``options.plan_replicas``: CPUs per replica, Ray's backpressure limits);
  3. start Serve's HTTP proxy on --host / --port (a Serve already running keeps its own);
  4. deploy ``WdeServer`` (``replica.py``): every replica builds the app and loads its engine; the deploy
     returns once every replica answers ``GET /health`` 200;
  5. print one ready line (the URL and the start-up cost of Ray), then wait for SIGINT / SIGTERM;
  6. stop: delete the application (replicas drain for up to --graceful-timeout, then their lifespans stop
     the engines), shut Serve and Ray down where this process started them.

Exit codes as ``wde serve``: 0 after a graceful stop, 2 for a user error (one line on stderr), 1 when the
replicas fail to start.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from server.process.listener import StartupError, bind_listener
from server.ray_serve.options import RayServeUserError, ReplicaPlan, plan_replicas
from server.ray_serve.proxy_errors import PROXY_CALLBACK, PROXY_CALLBACK_ENV

logger = logging.getLogger("wde.server")

LOGS_HINT = "the replicas' logs are in /tmp/ray/session_latest/logs/serve/ (of the node that ran them)"


class StopRequested(Exception):
    """SIGINT or SIGTERM arrived."""


@dataclass
class RaySession:
    """What this process joined or started, and the start-up timings (seconds)."""

    joined: bool  # True: the cluster of RAY_ADDRESS; False: a local cluster this process started
    address: str
    cpus: float
    gpus: float
    serve_started_here: bool = False
    url: str = ""
    timings: dict[str, float] = field(default_factory=dict)


def serve_on_ray(args: argparse.Namespace, build_app: Callable[[], Any]) -> int:
    """``wde serve --ray``: ``args`` are the parsed ``wde serve`` flags, ``build_app`` a picklable
    zero-argument callable returning the app (run in each replica). Blocks until SIGINT / SIGTERM."""
    # 1. Ray first: ray.init installs its own SIGTERM handler, which ours replaces
    try:
        session = connect_ray(args.log_level)
    except KeyboardInterrupt:
        return 0
    except (ConnectionError, ValueError, RuntimeError) as e:
        return _error(f"cannot join or start Ray: {e}; check RAY_ADDRESS (ray status)", 2)
    with _stop_on_signals():
        plan: ReplicaPlan | None = None
        try:
            # 2. the replicas' plan
            plan = plan_replicas(args, session.cpus, session.gpus, joined=session.joined)
            # 3-4. Serve's proxy, then the replicas
            start_serve(session, args.host, args.port, args.keep_alive_timeout, plan.app_name)
            deploy(session, plan, build_app, args.log_level)
            # 5. ready; wait for a signal
            print(ready_line(session, plan), flush=True)
            while True:
                time.sleep(3600)
        except StopRequested:
            pass
        except (RayServeUserError, StartupError) as e:
            _stop(session, plan)
            return _error(str(e), 2)
        except RuntimeError as e:  # the deploy failed: a replica did not start (its log says why)
            _stop(session, plan)
            return _error(f"the replicas did not start: {e}", 1)
        # 6. stop gracefully
        logger.info("stopping: the replicas drain for up to %g s", args.graceful_timeout)
        _stop(session, plan)
        return 0


def connect_ray(log_level: str, num_cpus: int | None = None) -> RaySession:
    """1. Join the cluster of RAY_ADDRESS, else start a local one (``num_cpus``: its CPUs; default all)."""
    import ray

    address = os.environ.get("RAY_ADDRESS")
    start = time.perf_counter()
    # the replicas' log lines (at --log-level: deploy() sets Serve's level) come to this terminal
    log_to_driver = log_level != "critical"
    if address:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=log_to_driver)
    else:
        # the proxies this cluster starts answer Ray's own 429 / 503 in our error shape (proxy_errors.py)
        os.environ.setdefault(PROXY_CALLBACK_ENV, PROXY_CALLBACK)
        ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=log_to_driver,
        )
    resources = ray.cluster_resources()
    session = RaySession(
        joined=bool(address),
        address=ray.get_runtime_context().gcs_address,
        cpus=float(resources.get("CPU", 1.0)),
        gpus=float(resources.get("GPU", 0.0)),
    )
    session.timings["ray.init"] = time.perf_counter() - start
    return session


def start_serve(session: RaySession, host: str, port: int, keep_alive_timeout: float, app_name: str) -> None:
    """3. Serve's HTTP proxy on host:port; a Serve already running on a joined cluster keeps its own."""
    from ray import serve

    start = time.perf_counter()
    status = serve.status()
    running = bool(status.proxies or status.applications)
    if app_name in status.applications:
        raise RayServeUserError(
            f"a Serve application named {app_name!r} already runs on this cluster; pass another "
            "--route-prefix (or --app-name), or stop that one first"
        )
    if not running:
        bind_listener(host, port).close()  # a busy port fails here in one line, not in the proxy actor
    serve.start(
        http_options={"host": host, "port": port, "keep_alive_timeout_s": max(1, round(keep_alive_timeout))}
    )
    session.serve_started_here = not running
    session.url = _proxy_url(host, port)
    session.timings["serve.start"] = time.perf_counter() - start


def deploy(session: RaySession, plan: ReplicaPlan, build_app: Callable[[], Any], log_level: str) -> None:
    """4. The application: returns once every replica's engine is ready (RuntimeError if one fails)."""
    from ray import serve
    from ray.serve import Deployment
    from ray.serve.config import BackpressureConfig

    from server.ray_serve.replica import ingress_deployment

    start = time.perf_counter()
    deployment: Deployment = serve.deployment(  # type: ignore[assignment]  # a class in: a Deployment out
        ingress_deployment(),
        backpressure_config=BackpressureConfig(status_code=429, retry_after_s=plan.retry_after_seconds),
        **plan.deployment_options(),
    )
    application = deployment.bind(build_app, plan.cpus_per_replica, plan.route_prefix, log_level)
    try:
        # Serve's own lines at --log-level, without its access log: the app writes its own (wde.access)
        logging_config = {"log_level": log_level.upper(), "enable_access_log": False}
        serve.run(
            application, name=plan.app_name, route_prefix=plan.route_prefix, logging_config=logging_config
        )
    except RuntimeError as e:
        raise RuntimeError(f"{_failure_reason(plan.app_name) or e}; {LOGS_HINT}") from e
    session.timings["replicas ready"] = time.perf_counter() - start


def _failure_reason(app_name: str) -> str:
    """The last line of the deployment's status message (the replica's exception), or ""."""
    from ray import serve

    try:
        deployments = serve.status().applications[app_name].deployments.values()
        messages = [d.message for d in deployments if d.message]
    except Exception:  # the reason is a courtesy: the logs have it
        return ""
    lines = [line.strip() for message in messages for line in message.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def ready_line(session: RaySession, plan: ReplicaPlan) -> str:
    """5. The one line a supervisor (or a person) waits for."""
    url = session.url.rstrip("/") + (plan.route_prefix if plan.route_prefix != "/" else "")
    cluster = "joined" if session.joined else "local"
    costs = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in session.timings.items())
    return (
        f"wde serve --ray: ready at {url} (app {plan.app_name}: {plan.describe()}; {cluster} Ray cluster "
        f"{session.address}, {session.cpus:g} CPUs); start-up: {costs}"
    )


def stop_ray(session: RaySession | None, app_name: str | None) -> None:
    """6. Delete the application (its replicas drain, then stop their engines); shut Serve and Ray down
    where this process started them."""
    import ray
    from ray import serve

    if session is None or not ray.is_initialized():
        return
    try:
        # the application first, while the proxy still runs: the requests in flight get their answers
        if app_name is not None and app_name in serve.status().applications:
            serve.delete(app_name)
        if session.serve_started_here:
            serve.shutdown()
    finally:
        if not session.joined:
            ray.shutdown()


def _stop(session: RaySession | None, plan: ReplicaPlan | None) -> None:
    with _ignore_signals():
        stop_ray(session, plan.app_name if plan is not None else None)


def _proxy_url(host: str, port: int) -> str:
    """The URL of the proxy Serve runs (on a joined cluster: the host and port it was started with)."""
    try:
        from ray.serve.context import _get_global_client

        client = _get_global_client()
        if client is not None:
            host, port = client.http_config.host or host, client.http_config.port
    except Exception:  # a private API: fall back on the flags
        pass
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _error(message: str, code: int) -> int:
    print(f"wde serve: error: {message}", file=sys.stderr)
    return code


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise StopRequested (once: a second one during the stop is ignored)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise StopRequested(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def _ignore_signals() -> Iterator[None]:
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
