"""The sentence-transformers backend peers of ``benchmarks.offline``: ``st-onnx``, ``st-onnx-int8`` (ONNX
Runtime, ``make peer-st-onnx``), ``st-openvino``, ``st-openvino-int8`` (OpenVINO, ``make peer-st-openvino``).
Each is a worker process (``benchmarks/peer_scripts/st_backend.py``, run by its venv's python) that stays
loaded, so that it is timed interleaved with sentence-transformers float32 and wde
(``benchmarks.interleave``).

- ONNX int8: dynamic quantization (``export_dynamic_quantized_onnx_model``) with the config this CPU's flags
  call for (``benchmarks.cpu_info.onnx_int8_config``: avx512_vnni > avx512 > avx2 > arm64).
- OpenVINO int8: static quantization (``export_static_quantized_openvino_model``), calibrated on the last
  ``CALIBRATION_TEXTS`` lines of ``--calibration-data`` (default: the shared ``docs.jsonl``); the bench
  refuses to run it when one of them is among the timed texts (``--limit 3700`` or less keeps them apart).

Exports are made once and kept in ``.bench-cache/`` (gitignored) beside the repository's code, keyed by model
(folder name and a hash of its path and file sizes), backend, sentence-transformers version and int8 config
(the ISA config's name, or a hash of the calibration texts).
"""

from __future__ import annotations

import hashlib
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

from benchmarks import peers
from benchmarks.cpu_info import cpu_flags, onnx_int8_config
from benchmarks.peer_scripts.st_backend import ProtocolError, WorkerError, message_line, parse_answer

WORKER_SCRIPT = peers.REPO_ROOT / "benchmarks" / "peer_scripts" / "st_backend.py"
CACHE_DIR = peers.REPO_ROOT / ".bench-cache"
CALIBRATION_TEXTS = 300
LOG_TAIL_CHARS = 3000


@dataclass(frozen=True)
class StPeer:
    backend: str  # onnx or openvino
    int8: bool
    # OpenVINO's INFERENCE_PRECISION_HINT: None keeps its default, which is bf16 on CPUs with native bf16
    # (AVX512_BF16, AMX), so that its "float32" model is not exact there; "f32" forces float32.
    precision_hint: str | None = None


ST_PEERS = {
    "st-onnx": StPeer("onnx", False),
    "st-onnx-int8": StPeer("onnx", True),
    "st-openvino": StPeer("openvino", False),
    "st-openvino-f32": StPeer("openvino", False, "f32"),
    "st-openvino-int8": StPeer("openvino", True),
    "st-openvino-int8-f32": StPeer("openvino", True, "f32"),
}


def model_cache_dir(model: str | Path, root: Path = CACHE_DIR) -> Path:
    """``root/<parent folder>-<model folder>-<hash>``: the hash covers the model's resolved path and its
    files' names and sizes, so a changed model, or another with the same folder names, has its own exports."""
    model = Path(model).resolve()
    digest = hashlib.sha256(str(model).encode())
    for path in sorted(model.rglob("*")):
        if path.is_file():
            digest.update(f"{path.relative_to(model)}:{path.stat().st_size}".encode())
    return root / f"{model.parent.name}-{model.name}-{digest.hexdigest()[:10]}"


def calibration_texts(lines: list[str], timed: list[str], count: int = CALIBRATION_TEXTS) -> list[str]:
    """The last ``count`` texts of ``lines``; ``ValueError`` when one of them is also timed."""
    chosen = lines[-count:]
    if overlap := set(chosen) & set(timed):
        raise ValueError(
            f"st-openvino-int8 calibrates on the last {count} texts of the calibration data, and "
            f"{len(overlap)} of them are timed too; pass --limit {max(len(lines) - count, 0)} or less, or "
            "--calibration-data FILE with other texts"
        )
    return chosen


def write_calibration(texts: list[str], root: Path = CACHE_DIR) -> dict[str, Any]:
    """The calibration texts as ``root/calibration-<hash>/calibration.jsonl`` (a folder that
    ``datasets.load_dataset`` reads as one ``text`` column); the worker's ``calibration`` field."""
    key = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:10]
    folder = root / f"calibration-{key}"
    path = folder / "calibration.jsonl"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        partial.rename(path)
    return {"dir": str(folder), "key": key, "num_samples": len(texts)}


def load_command(
    name: str,
    model: str,
    threads: int,
    batch_size: int,
    calibration: dict[str, Any] | None,
    flags: set[str] | None = None,
    task: str = "embed",
) -> dict[str, Any]:
    """The worker's load command for peer ``name``; ``task`` "score" loads a ``CrossEncoder``."""
    peer = ST_PEERS[name]
    command: dict[str, Any] = {
        "cmd": "load",
        "model": str(Path(model).resolve()),
        "backend": peer.backend,
        "int8": peer.int8,
        "threads": threads,
        "batch_size": batch_size,
        "cache_dir": str(model_cache_dir(model)),
        "task": task,
    }
    if peer.precision_hint is not None:
        command["precision_hint"] = peer.precision_hint
    if peer.int8 and peer.backend == "onnx":
        command["onnx_config"] = onnx_int8_config(cpu_flags() if flags is None else flags)
    if peer.int8 and peer.backend == "openvino":
        if calibration is None:
            raise ValueError("st-openvino-int8 needs calibration texts")
        command["calibration"] = calibration
    return command


def worker_env(threads: int) -> dict[str, str]:
    """The parent's environment with the thread count pinned and nothing looking for a hub."""
    return {
        **os.environ,
        **peers.QUIET_ENV,
        "HF_DATASETS_OFFLINE": "1",
        "OMP_NUM_THREADS": str(threads),
        "PYTHONUNBUFFERED": "1",
    }


class StWorker:
    """A running ``st_backend.py`` worker: ``request`` sends one command and returns its answer; its stderr
    goes to a log file whose tail comes with any error."""

    def __init__(self, name: str, threads: int, workdir: Path) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self._log = self.log_path.open("w", encoding="utf-8")
        self.process = subprocess.Popen(
            [str(peers.executable(name)), str(WORKER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            encoding="utf-8",
            env=worker_env(threads),
            cwd=workdir,
        )

    def request(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(message_line(command))
            self.process.stdin.flush()
            return parse_answer(self.process.stdout.readline())
        except (WorkerError, ProtocolError, BrokenPipeError) as e:
            raise RuntimeError(
                f"peer {self.name!r} failed on {command['cmd']}: {e}\n"
                f"--- the end of its log ({self.log_path}):\n{self.log_tail()}"
            ) from e

    def log_tail(self) -> str:
        self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.request({"cmd": "quit"})
                self.process.wait(timeout=30)
            except (RuntimeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._log.close()


class StPeerSystem:
    """A loaded worker as a ``benchmarks.interleave.System``: the texts (a cross-encoder's pairs) go to it
    once as a JSON file, each pass is timed inside the worker, embeddings (scores) come back as .npy files."""

    def __init__(self, worker: StWorker, label: str, texts: list[Any], workdir: Path) -> None:
        self.worker, self.label, self.dtype = worker, label, "float32"
        self.workdir = workdir
        self.texts_file = self._write_texts(texts, "timed")
        self._kept = workdir / f"{worker.name}-timed.npy"

    def _write_texts(self, texts: list[Any], name: str) -> str:
        path = self.workdir / f"{self.worker.name}-{name}.json"
        path.write_text(json.dumps(texts), encoding="utf-8")
        return str(path)

    def time_pass(self, keep: bool) -> float:
        answer = self.worker.request(
            {"cmd": "time", "texts": self.texts_file, "out": str(self._kept) if keep else None}
        )
        return float(answer["seconds"])

    def last_embeddings(self) -> np.ndarray:
        return np.load(self._kept)

    def embed(self, texts: list[str]) -> np.ndarray:
        out = self.workdir / f"{self.worker.name}-extra.npy"
        self.worker.request({"cmd": "embed", "texts": self._write_texts(texts, "extra"), "out": str(out)})
        return np.load(out)


def start(
    names: list[str],
    model: str,
    texts: list[Any],
    threads: int,
    batch_size: int,
    calibration: dict[str, Any] | None,
    workdir: Path,
    load_failures: list[str] | None = None,
    task: str = "embed",
) -> list[StPeerSystem]:
    """One loaded worker per name in ``workdir``, loaded one after another (two workers of a venv share an
    export folder, so they never export at the same time). Close them with ``close`` (``running`` does
    both). ``load_failures``: a peer that cannot load (export) the model is left out and one line saying why
    is appended here (else it raises). ``task`` "score": ``model`` is a cross-encoder and ``texts`` its
    ``(query, document)`` pairs."""
    systems: list[StPeerSystem] = []
    try:
        for name in names:
            worker = StWorker(name, threads, workdir)
            try:
                command = load_command(name, model, threads, batch_size, calibration, task=task)
                answer = worker.request(command)
            except Exception as e:
                worker.close()
                if load_failures is None:
                    raise
                load_failures.append(f"peer {name!r} could not load this model: {_first_line(e)}")
                continue
            systems.append(StPeerSystem(worker, answer["label"], texts, workdir))
    except Exception:
        close(systems)
        raise
    return systems


@contextmanager
def running(
    names: list[str],
    model: str,
    texts: list[Any],
    threads: int,
    batch_size: int,
    calibration: dict[str, Any] | None,
    load_failures: list[str] | None = None,
    task: str = "embed",
) -> Iterator[list[StPeerSystem]]:
    """``start`` in a scratch folder of their own; the workers are closed and the folder removed when the
    block ends (read their embeddings inside it)."""
    with tempfile.TemporaryDirectory(prefix="wde-bench-st-") as workdir:
        systems = start(
            names, model, texts, threads, batch_size, calibration, Path(workdir), load_failures, task
        )
        try:
            yield systems
        finally:
            close(systems)


def close(systems: list[StPeerSystem]) -> None:
    for system in systems:
        system.worker.close()


def _first_line(error: Exception) -> str:
    """The error's first line (a worker's error carries the end of its log after it)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
