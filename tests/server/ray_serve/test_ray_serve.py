"""``wde serve --ray`` on a local Ray cluster: two Ray Serve replicas of the bundled model behind Serve's
proxy, with --max-concurrent-requests 2 (as test_uvicorn's live server).

- The held-out HTTP checks of the single server run unchanged against the Ray Serve URL: test_uvicorn's
  test functions are imported here, so pytest runs them with this module's ``live_server`` (the proxy).
- The same requests answer the same (status, JSON within 1e-6) on one uvicorn and on Ray Serve.
- Two replicas answer two requests at once; a burst gets 200 or 429 + Retry-After in our error shape.
- The real ``wde serve --ray`` command joins the cluster (RAY_ADDRESS) with a route prefix and stops
  gracefully on SIGTERM (the request in flight answered, exit 0), leaving the other application running.

Slow: one local cluster for the module (~25 s to start on 2 cores); the module runs in ~80 s. The last
tests (the plan, the proxy's error shape, the replica's readiness wait) need no cluster.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pytest

from server.ray_serve.options import RayServeUserError, plan_replicas
from server.ray_serve.proxy_errors import ProxyErrorShapeMiddleware
from server.settings import ServerSettings
from tests.server.conftest import LONG_TEXT, TEXTS, LiveServer, live_uvicorn
from tests.server.launch.test_uvicorn import (  # noqa: F401 (collected here, against the Ray Serve URL)
    test_burst_over_the_concurrency_limit_gets_only_200_and_429,
    test_embed_and_metrics,
    test_hostile_bodies_get_4xx_json_never_500,
    test_openai_sdk_float_and_base64_equal_llm_encode,
    test_openai_sdk_sees_errors_as_exceptions,
    test_ten_megabyte_body_is_413,
)
from tests.server.serve_process import free_port, serve_process
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

TIMEOUT = 60.0
# two processes on one CPU: each times its float32 GEMMs at load (packed_linear.py) and may keep another one
FLOAT_TOLERANCE = 1e-5
# differ by process or request: /v1/models' "created" (when the model loaded), Cohere's response "id" (a uuid;
# /tokenize's int token "id"s are compared), /info's "num_loads" (0 for the engine the test fixture started
# itself, 1 where the app's lifespan loaded it, as in wde serve)
PER_REQUEST_KEYS = {"created": (int, float), "id": (str,), "num_loads": (int,)}
CLUSTER_CPUS = 3  # two replicas of 1 CPU, and one more for the command that joins
SERVE_FLAGS = ["--num-replicas", "2", "--cpus-per-replica", "1", "--max-concurrent-requests", "2"]
READY_LINE = re.compile(r"wde serve --ray: ready at (\S+)")
# every test here, test_uvicorn's checks collected here included (the mark is this module's, not theirs)
pytestmark = pytest.mark.slow


# ---- the cluster: started once for the module -----------------------------------------------------------
@pytest.fixture(scope="module")
def ray_serve() -> Iterator[SimpleNamespace]:
    """Ray (local, CLUSTER_CPUS) + Serve on a free port + the wde application, two replicas."""
    pytest.importorskip("ray.serve", reason="Ray Serve is not installed: pip install 'wde[server,ray]'")
    import ray

    from server import cli
    from server.ray_serve import deployment

    # `wde serve --ray FLAGS` up to serve_on_ray: the namespace and the app builder exactly as the command
    # makes them (flags checked, settings verified), without its blocking wait for a signal
    port = free_port()
    command: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(deployment, "serve_on_ray", lambda args, build_app: command.update(locals()) or 0)
        assert cli.main(["serve", "--ray", "--port", str(port), *SERVE_FLAGS]) == 0
    args, build_app = command["args"], command["build_app"]
    saved_env = {name: os.environ.pop(name, None) for name in ("RAY_ADDRESS", deployment.PROXY_CALLBACK_ENV)}
    if ray.is_initialized():  # a Ray session another test left: this module needs its own cluster
        ray.shutdown()
    session, plan = None, None
    try:
        session = deployment.connect_ray("warning", num_cpus=CLUSTER_CPUS)
        plan = plan_replicas(args, session.cpus, session.gpus, joined=False)
        deployment.start_serve(session, args.host, port, args.keep_alive_timeout, plan.app_name)
        deployment.deploy(session, plan, build_app, "warning")
        print(deployment.ready_line(session, plan))
        yield SimpleNamespace(url=session.url, port=port, address=session.address, timings=session.timings)
    finally:
        deployment.stop_ray(session, plan.app_name if plan else None)
        if ray.is_initialized():
            ray.shutdown()
        for name, value in saved_env.items():
            if value is not None:
                os.environ[name] = value
            else:
                os.environ.pop(name, None)


@pytest.fixture(scope="module")
def live_server(ray_serve: SimpleNamespace) -> LiveServer:
    """The Ray Serve proxy, under the name test_uvicorn's checks take their server by."""
    return LiveServer(ray_serve.url, ray_serve.port)


@pytest.fixture(scope="module")
def single_server(async_engine: AsyncLLMEngine) -> Iterator[LiveServer]:
    with live_uvicorn(async_engine, ServerSettings(max_concurrent_requests=2)) as server:
        yield server


# ---- the same answers as the single server --------------------------------------------------------------
SAME_REQUESTS: list[tuple[str, str, Any]] = [
    ("GET", "/health", None),
    ("GET", "/info", None),
    ("GET", "/v1/models", None),
    ("POST", "/embed", {"inputs": TEXTS}),
    ("POST", "/embed", {"inputs": "hello", "normalize": False}),
    ("POST", "/v1/embeddings", {"input": TEXTS, "encoding_format": "float"}),
    ("POST", "/v1/embeddings", {"input": "x", "dimensions": 999}),
    ("POST", "/rerank", {"query": "What is Debian?", "texts": ["A free operating system.", "x", "a dog"]}),
    ("POST", "/v1/rerank", {"query": "What is Debian?", "documents": ["A free operating system.", "x"]}),
    ("POST", "/tokenize", {"inputs": "hello world"}),
    ("POST", "/embed", {"inputs": []}),
    ("POST", "/nope", {"inputs": "x"}),
]


def assert_same_json(got: Any, expected: Any, where: str = "$") -> None:
    """Equal JSON, floats within FLOAT_TOLERANCE (PER_REQUEST_KEYS: present, any value)."""
    if isinstance(expected, float) or isinstance(got, float):
        assert abs(float(got) - float(expected)) <= FLOAT_TOLERANCE, (where, got, expected)
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and got.keys() == expected.keys(), (where, got, expected)
        for key in expected:
            if isinstance(expected[key], PER_REQUEST_KEYS.get(key, ())):
                continue
            assert_same_json(got[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), (where, got, expected)
        for index, (g, e) in enumerate(zip(got, expected, strict=True)):
            assert_same_json(g, e, f"{where}[{index}]")
    else:
        assert got == expected, (where, got, expected)


@pytest.mark.parametrize(
    ("method", "path", "body"), SAME_REQUESTS, ids=[f"{m} {p}" for m, p, _ in SAME_REQUESTS]
)
def test_ray_serve_answers_as_the_single_server(
    ray_serve: SimpleNamespace, single_server: LiveServer, method: str, path: str, body: Any
) -> None:
    single = httpx.request(method, f"{single_server.url}{path}", json=body, timeout=TIMEOUT)
    ray = httpx.request(method, f"{ray_serve.url}{path}", json=body, timeout=TIMEOUT)
    assert ray.status_code == single.status_code, (ray.text, single.text)
    assert ray.headers.get("retry-after") == single.headers.get("retry-after")
    assert_same_json(ray.json(), single.json())
    assert ray.headers["x-wde-replica"]  # every answer names the replica that made it


# ---- two replicas, backpressure -------------------------------------------------------------------------
def two_replicas_at_once(url: str) -> tuple[bool, list[Any]]:
    """Four staggered long /embed requests: did two replicas answer at once? (and what happened)"""
    body = {"inputs": [LONG_TEXT] * 48}  # 6 forward passes of 2048 tokens: seconds on one thread

    async def four_staggered() -> list[tuple[float, float, httpx.Response]]:
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:

            async def timed(delay: float) -> tuple[float, float, httpx.Response]:
                await asyncio.sleep(delay)  # later ones go once the router counts the earlier as ongoing
                start = time.monotonic()
                response = await client.post("/embed", json=body)
                return start, time.monotonic(), response

            return await asyncio.gather(*(timed(0.3 * i) for i in range(4)))

    results = asyncio.run(four_staggered())
    # a replica takes 2 at once (--max-concurrent-requests 2 in this fixture): a third sent its way is a 429
    assert all(r.status_code == 200 or "retry-after" in r.headers for _, _, r in results), [
        r.text for _, _, r in results
    ]
    answers = [result for result in results if result[2].status_code == 200]
    first = np.array(answers[0][2].json())
    assert all(np.allclose(response.json(), first, atol=FLOAT_TOLERANCE) for _, _, response in answers[1:])
    overlapping = any(
        a[2].headers["x-wde-replica"] != b[2].headers["x-wde-replica"] and a[0] < b[1] and b[0] < a[1]
        for i, a in enumerate(answers)
        for b in answers[i + 1 :]
    )
    return overlapping, [
        (r.status_code, r.headers.get("x-wde-replica"), end - start) for start, end, r in results
    ]


def test_two_replicas_answer_concurrently(ray_serve: SimpleNamespace) -> None:
    """Ray's router picks the less loaded of two replicas by a queue length it caches for up to
    RAY_SERVE_QUEUE_LENGTH_CACHE_TIMEOUT_S (10 s): an entry left stale by an earlier test can send a whole
    round to one replica (seen once in CI). So: up to three rounds, the cache's lifetime apart."""
    from ray import serve
    from ray.serve._private.constants import RAY_SERVE_QUEUE_LENGTH_CACHE_TIMEOUT_S

    deployment = serve.status().applications["wde"].deployments["WdeServer"]
    assert deployment.replica_states.get("RUNNING") == 2, deployment
    rounds = []
    for _ in range(3):
        overlapping, seen = two_replicas_at_once(ray_serve.url)
        rounds.append(seen)
        if overlapping:
            break
        time.sleep(RAY_SERVE_QUEUE_LENGTH_CACHE_TIMEOUT_S)
    assert overlapping, rounds  # (status, replica, seconds) per request, per round


def test_burst_beyond_rays_queue_is_429_in_our_shape_never_a_hang(ray_serve: SimpleNamespace) -> None:
    """Past the replicas' own limit (their 429) and Ray's (max_ongoing 12 x 2 replicas, queue 12: the
    proxy's 429): every answer is 200 or 429 + Retry-After, in the TEI or OpenAI error shape."""

    async def burst() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(base_url=ray_serve.url, timeout=TIMEOUT, limits=limits) as client:
            tei = [client.post("/embed", json={"inputs": [LONG_TEXT] * 4}) for _ in range(40)]
            openai = [client.post("/v1/embeddings", json={"input": [LONG_TEXT] * 4}) for _ in range(40)]
            return await asyncio.gather(*tei, *openai)

    responses = asyncio.run(asyncio.wait_for(burst(), TIMEOUT * 2))
    statuses = [response.status_code for response in responses]
    assert set(statuses) <= {200, 429} and 200 in statuses, statuses
    messages = set()
    for response in responses:
        if response.status_code != 429:
            continue
        assert response.headers["retry-after"] == "1"
        error = response.json()["error"]
        if response.request.url.path.startswith("/v1/"):
            assert error["code"] == "rate_limit_exceeded" and error["type"] == "rate_limit_error"
            messages.add(error["message"].split(";")[0])
        else:
            assert response.json()["error_type"] == "Overloaded"
            messages.add(error.split(";")[0])
    # the replicas' admission and, for what Ray's queue could not hold, the proxy
    assert any("--max-concurrent-requests" in message for message in messages), messages
    assert any("queue is full" in message for message in messages), messages
    assert (
        httpx.post(f"{ray_serve.url}/embed", json={"inputs": "still here"}, timeout=TIMEOUT).status_code
        == 200
    )


# ---- the real command joins the cluster ----------------------------------------------------------------
def test_wde_serve_ray_joins_the_cluster_with_a_route_prefix(
    ray_serve: SimpleNamespace, tmp_path: Path
) -> None:
    env = {"RAY_ADDRESS": ray_serve.address}
    flags = ["--ray", "--route-prefix", "/minilm", "--num-replicas", "1", "--cpus-per-replica", "1"]
    with serve_process(tmp_path, *flags, "--log-level", "warning", env=env) as server:
        # 1. ready: one line naming the URL (the proxy the cluster already runs) and the start-up cost
        deadline = time.monotonic() + 120
        while not (match := READY_LINE.search(server.log())):
            assert server.process.poll() is None and time.monotonic() < deadline, server.log()
            time.sleep(0.2)
        url = match.group(1)
        print(next(line for line in server.log().splitlines() if "ready at" in line))  # the start-up cost
        assert url == f"{ray_serve.url}/minilm" and "ray.init" in server.log(), server.log()
        # 2. the app under the prefix: same answers, its own error shapes
        assert httpx.get(f"{url}/health", timeout=TIMEOUT).status_code == 200
        prefixed = httpx.post(f"{url}/embed", json={"inputs": TEXTS}, timeout=TIMEOUT)
        root = httpx.post(f"{ray_serve.url}/embed", json={"inputs": TEXTS}, timeout=TIMEOUT)
        assert prefixed.status_code == 200 and np.allclose(prefixed.json(), root.json(), atol=FLOAT_TOLERANCE)
        invalid = httpx.post(f"{url}/v1/embeddings", json={"input": []}, timeout=TIMEOUT)
        assert invalid.status_code == 422 and invalid.json()["error"]["param"] == "input"
        # 3. SIGTERM: the request in flight is answered, exit 0, its application deleted, the cluster's
        #    other one still serving
        with ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(
                httpx.post, f"{url}/embed", json={"inputs": [LONG_TEXT] * 16}, timeout=TIMEOUT
            )
            time.sleep(0.5)
            server.process.send_signal(signal.SIGTERM)
            assert in_flight.result().status_code == 200
        assert server.wait(TIMEOUT) == 0, server.log()
    # the prefix is gone: the application at / takes the path, and answers its own 404
    gone = httpx.get(f"{url}/health", timeout=TIMEOUT)
    assert gone.status_code == 404 and gone.json()["error_type"] == "NotFound", gone.text
    assert httpx.get(f"{ray_serve.url}/health", timeout=TIMEOUT).status_code == 200


# ---- without Ray: the plan and the proxy's error shape -------------------------------------------------
def _args(**flags: Any) -> SimpleNamespace:
    defaults = {
        "num_replicas": 1,
        "cpus_per_replica": None,
        "gpus_per_replica": None,
        "min_replicas": 1,
        "max_replicas": None,
        "target_ongoing_requests": None,
        "max_ongoing_requests": None,
        "max_queued_requests": None,
        "route_prefix": "/",
        "app_name": None,
        "max_concurrent_requests": 512,
        "retry_after_seconds": 1,
        "graceful_timeout": 30.0,
        "device": "auto",
    }
    return SimpleNamespace(**{**defaults, **flags})


def test_plan_derives_rays_limits_from_ours_and_cpus_from_the_cluster() -> None:
    plan = plan_replicas(_args(num_replicas=2, max_concurrent_requests=2), 16, 0, joined=False)
    options = plan.deployment_options()
    assert options["num_replicas"] == 2 and options["ray_actor_options"] == {"num_cpus": 8, "num_gpus": 0}
    assert options["max_ongoing_requests"] == 12 and options["max_queued_requests"] == 12
    assert plan.app_name == "wde" and "2 replicas x 8 CPUs" in plan.describe()
    auto = plan_replicas(_args(num_replicas="auto", route_prefix="/bge/small"), 8, 1, joined=False)
    assert auto.autoscaling_config == {
        "min_replicas": 1,
        "initial_replicas": 1,
        "max_replicas": 8,
        "target_ongoing_requests": 8,
    }
    assert "num_replicas" not in auto.deployment_options() and auto.gpus_per_replica == 1
    assert auto.app_name == "wde-bge-small"
    with pytest.raises(RayServeUserError, match="do not fit"):
        plan_replicas(_args(num_replicas=3), 2, 0, joined=False)
    plan_replicas(_args(num_replicas=3, cpus_per_replica=1), 2, 0, joined=True)  # a cluster may grow
    with pytest.raises(RayServeUserError, match="--min-replicas 4"):
        plan_replicas(_args(num_replicas="auto", min_replicas=4, max_replicas=2), 8, 0, joined=False)


@pytest.mark.parametrize(
    ("path", "status", "headers", "ours", "expected"),
    [
        ("/embed", 429, [(b"retry-after", b"3")], 429, {"error_type": "Overloaded"}),
        ("/v1/embeddings", 429, [(b"retry-after", b"3")], 429, {"code": "rate_limit_exceeded"}),
        ("/embed", 503, [], 503, {"error_type": "Unhealthy"}),
        ("/v1/embeddings", 404, [], 503, {"code": "unavailable"}),  # no app routes it: starting / stopping
    ],
)
def test_proxy_answers_rays_own_rejections_in_our_error_shape(path, status, headers, ours, expected) -> None:
    async def ray_rejection(scope: Any, receive: Any, send: Any) -> None:
        start_headers = [(b"content-type", b"text/plain; charset=utf-8"), *headers]
        await send({"type": "http.response.start", "status": status, "headers": start_headers})
        await send({"type": "http.response.body", "body": b"Request dropped due to backpressure"})

    async def app_json(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 429,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"error": "ours"}'})

    async def call(app: Any) -> tuple[int, dict[str, str], bytes]:
        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)

        await ProxyErrorShapeMiddleware(app)({"type": "http", "path": path}, None, send)
        start, *bodies = sent
        head = {k.decode(): v.decode() for k, v in start["headers"]}
        return start["status"], head, b"".join(m.get("body", b"") for m in bodies)

    got_status, got_headers, got_body = asyncio.run(call(ray_rejection))
    body = json.loads(got_body)
    assert got_status == ours and got_headers["content-type"] == "application/json"
    assert got_headers["retry-after"] == ("3" if headers else "1")
    flat = body["error"] if path.startswith("/v1/") else body
    assert expected.items() <= flat.items() and "backpressure" in str(body)
    assert asyncio.run(call(app_json))[2] == b'{"error": "ours"}'  # the app's own answers pass untouched


def test_replica_waits_for_health_and_fails_on_a_dead_engine() -> None:
    pytest.importorskip("ray.serve", reason="Ray Serve is not installed: pip install 'wde[server,ray]'")
    from server.ray_serve.replica import ReplicaNotReadyError, wait_until_healthy

    def health_app(answers: list[tuple[int, list[tuple[bytes, bytes]]]]) -> Any:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            assert scope["path"] == "/health"
            status, headers = answers.pop(0) if len(answers) > 1 else answers[0]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": b'{"error": "why"}'})

        return app

    loading = (503, [(b"retry-after", b"1")])
    asyncio.run(wait_until_healthy(health_app([loading, loading, (200, [])]), timeout=30))
    with pytest.raises(ReplicaNotReadyError, match="failed to load"):
        asyncio.run(wait_until_healthy(health_app([loading, (503, [])]), timeout=30))
    with pytest.raises(ReplicaNotReadyError, match="not ready after"):
        asyncio.run(wait_until_healthy(health_app([loading]), timeout=0.3))
