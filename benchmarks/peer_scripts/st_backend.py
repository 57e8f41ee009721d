"""sentence-transformers on its ONNX Runtime or OpenVINO backend, float32 or int8, as a long-lived worker run
by a peer venv's python (``make peer-st-onnx`` / ``make peer-st-openvino``), never by wde:

    .venv-st-onnx/bin/python benchmarks/peer_scripts/st_backend.py

``benchmarks.st_peers`` starts one worker per ``--peer st-*`` and keeps it loaded, so that
``benchmarks.offline`` can time every system in turn, once per repeat (interleaved), instead of one system's
repeats back to back.

Protocol: one JSON object per line on stdin, one JSON answer per line on stdout (``{"ok": true, ...}`` or
``{"ok": false, "error": "..."}``); whatever the libraries print goes to stderr (fd 1 is pointed at fd 2 at
start, the answers use a private copy of the original stdout). Commands:

- ``{"cmd": "load", "model": DIR, "backend": "onnx"|"openvino", "int8": bool, "threads": N, "batch_size": N,
  "cache_dir": DIR, "task": "embed"|"score" (default embed), "onnx_config": "avx512_vnni"|"avx512"|"avx2"|
  "arm64"|null, "calibration": null | {"dir": DIR, "key": STR, "num_samples": N}}``: exports (once; the
  exports are kept under ``cache_dir``) and loads the model, a ``SentenceTransformer`` (embed) or a
  ``CrossEncoder`` (score); answers ``label``, ``file`` (the model file loaded) and ``versions``.
- ``{"cmd": "time", "texts": FILE, "out": FILE.npy | null}``: one ``encode`` pass over the JSON list of texts
  in FILE (a ``CrossEncoder``: one ``predict`` pass over a JSON list of ``[query, document]`` pairs, scores
  ``[num_pairs, 1]``); answers ``seconds`` (measured here, so the pipe costs nothing) and writes the
  embeddings (scores) to ``out``.
- ``{"cmd": "embed", "texts": FILE, "out": FILE.npy}``: embeds the texts, untimed, into ``out``.
- ``{"cmd": "quit"}``: answers and exits.

Exports, in ``cache_dir/<backend>-st<version>/`` (a copy of the model folder, so the model's own folder is
never written): the float32 export that ``SentenceTransformer(..., backend=...)`` makes, saved with
``save_pretrained``; ONNX int8 with ``export_dynamic_quantized_onnx_model`` and the ISA config the parent
picked from the CPU flags; OpenVINO int8 with ``export_static_quantized_openvino_model``, whose calibration
set is read from a local folder holding one ``calibration.jsonl`` (``{"text": ...}`` lines the parent wrote;
that function's default calibration set is a download; a ``CrossEncoder`` is calibrated on the same single
texts, the one column that function takes). Threads: ``torch.set_num_threads``, ONNX Runtime's
intra-op threads (``session_options``) and OpenVINO's ``INFERENCE_NUM_THREADS`` (``ov_config``), all from
``threads``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Literal, TextIO, cast

BACKENDS = ("onnx", "openvino")
TASKS = ("embed", "score")  # SentenceTransformer.encode, CrossEncoder.predict
ONNX_CONFIGS = ("arm64", "avx2", "avx512", "avx512_vnni")
# the keys each command needs, with their JSON types
COMMANDS: dict[str, dict[str, tuple[type, ...]]] = {
    "load": {
        "model": (str,),
        "backend": (str,),
        "int8": (bool,),
        "threads": (int,),
        "batch_size": (int,),
        "cache_dir": (str,),
    },
    "time": {"texts": (str,)},
    "embed": {"texts": (str,), "out": (str,)},
    "quit": {},
}
MANIFEST = "wde-bench-exports.json"  # the files whose export finished, in an export folder
BASE_FILES = {"onnx": "onnx/model.onnx", "openvino": "openvino/openvino_model.xml"}
PACKAGES = {
    "onnx": ("sentence-transformers", "transformers", "torch", "onnxruntime", "optimum", "optimum-onnx"),
    "openvino": ("sentence-transformers", "transformers", "torch", "openvino", "optimum-intel", "nncf"),
}

STBackend = Literal["torch", "onnx", "openvino"]  # SentenceTransformer(backend=...)


class ProtocolError(ValueError):
    """A command or an answer that is not what the protocol says."""


class WorkerError(RuntimeError):
    """The worker answered ``{"ok": false, "error": ...}``."""


# --- the protocol, shared with the parent (benchmarks.st_peers imports these) -------------------------------


def message_line(message: dict[str, Any]) -> str:
    """One protocol line: compact JSON and a newline (JSON escapes any newline inside a string)."""
    return json.dumps(message, separators=(",", ":")) + "\n"


def parse_command(line: str) -> dict[str, Any]:
    """A command line as a dict, checked against ``COMMANDS`` (and the load command's values)."""
    try:
        command = json.loads(line)
    except json.JSONDecodeError as e:
        raise ProtocolError(f"not JSON: {line.strip()[:200]!r} ({e})") from e
    if not isinstance(command, dict) or command.get("cmd") not in COMMANDS:
        raise ProtocolError(f"expected an object with cmd one of {sorted(COMMANDS)}: {line.strip()[:200]!r}")
    for key, types in COMMANDS[command["cmd"]].items():
        if not isinstance(command.get(key), types) or (bool not in types and isinstance(command[key], bool)):
            raise ProtocolError(f"{command['cmd']}: {key!r} must be {' or '.join(t.__name__ for t in types)}")
    if command["cmd"] == "load":
        _check_load(command)
    return command


def _check_load(command: dict[str, Any]) -> None:
    if command["backend"] not in BACKENDS:
        raise ProtocolError(f"load: backend must be one of {BACKENDS}, got {command['backend']!r}")
    if command.get("task", "embed") not in TASKS:
        raise ProtocolError(f"load: task must be one of {TASKS}, got {command['task']!r}")
    if command["threads"] < 1 or command["batch_size"] < 1:
        raise ProtocolError("load: threads and batch_size must be at least 1")
    if command.get("precision_hint") not in (None, "f32", "bf16", "f16"):
        hint = command["precision_hint"]
        raise ProtocolError(f"load: precision_hint must be f32, bf16 or f16, got {hint!r}")
    if command["int8"] and command["backend"] == "onnx" and command.get("onnx_config") not in ONNX_CONFIGS:
        raise ProtocolError(f"load: ONNX int8 needs onnx_config, one of {ONNX_CONFIGS}")
    calibration = command.get("calibration")
    complete = isinstance(calibration, dict) and {"dir", "key", "num_samples"} <= set(calibration)
    if command["int8"] and command["backend"] == "openvino" and not complete:
        raise ProtocolError("load: OpenVINO int8 needs calibration {dir, key, num_samples}")


def parse_answer(line: str) -> dict[str, Any]:
    """The worker's answer line as a dict; ``WorkerError`` when it says it failed, ``ProtocolError`` when the
    line is no answer at all (an empty line: the worker exited)."""
    if not line:
        raise ProtocolError("the worker exited without answering")
    try:
        answer = json.loads(line)
    except json.JSONDecodeError as e:
        raise ProtocolError(f"the worker answered a line that is not JSON: {line.strip()[:200]!r}") from e
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
        raise ProtocolError(f"the worker's answer has no ok field: {line.strip()[:200]!r}")
    if not answer["ok"]:
        raise WorkerError(str(answer.get("error", "no error message")))
    return answer


# --- exports ------------------------------------------------------------------------------------------------


def export_folder(cache_dir: Path, backend: str, st_version: str) -> Path:
    """``cache_dir/<backend>-st<version>``: each sentence-transformers version saves its own copy."""
    return cache_dir / f"{backend}-st{st_version}"


def finished_exports(folder: Path) -> set[str]:
    path = folder / MANIFEST
    return set(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else set()


def mark_exported(folder: Path, file: str) -> None:
    """Record ``file`` as complete; an export cut off half way is not in the manifest and is made again."""
    done = finished_exports(folder) | {file}
    (folder / MANIFEST).write_text(json.dumps(sorted(done)), encoding="utf-8")


def copy_model(model: Path, folder: Path) -> None:
    """The model folder copied to ``folder`` (once; through a temporary sibling, renamed when complete)."""
    if folder.is_dir():
        return
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(model, partial, symlinks=False)
    partial.rename(folder)


def int8_file(backend: str, onnx_config: str | None, calibration: dict[str, Any] | None) -> tuple[str, str]:
    """(file suffix, file path in the export folder) of an int8 export; the suffix names its config."""
    if backend == "onnx":
        suffix = f"qint8_{onnx_config}"
        return suffix, f"onnx/model_{suffix}.onnx"
    if calibration is None:
        raise ValueError("an OpenVINO static int8 export needs its calibration set")
    suffix = f"qint8_static_{calibration['key']}"
    return suffix, f"openvino/openvino_model_{suffix}.xml"


# --- the worker ---------------------------------------------------------------------------------------------


class Worker:
    """One loaded model; ``handle`` runs a parsed command and returns the answer's fields."""

    def __init__(self) -> None:
        self.model: Any = None
        self.task = "embed"
        self.batch_size = 32
        self.texts: dict[str, list[Any]] = {}  # texts, or a cross-encoder's (query, document) pairs

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        if command["cmd"] == "load":
            return self.load(command)
        if self.model is None:
            raise ProtocolError(f"{command['cmd']}: send load first")
        if command["cmd"] == "time":
            return self.time(command["texts"], command.get("out"))
        return self.embed(command["texts"], command["out"])

    def load(self, command: dict[str, Any]) -> dict[str, Any]:
        import torch
        from sentence_transformers import __version__ as st_version

        torch.set_num_threads(command["threads"])
        backend, threads = command["backend"], command["threads"]
        self.task = command.get("task", "embed")
        folder = export_folder(Path(command["cache_dir"]), backend, st_version)
        copy_model(Path(command["model"]), folder)
        file = self._ensure_base_export(folder, backend)
        if command["int8"]:
            file = self._ensure_int8_export(folder, command)
        self.model = _load(self.task, folder, backend, file, threads, command.get("precision_hint"))
        self.batch_size = command["batch_size"]
        versions = _versions(backend)
        return {"label": _label(command, versions), "file": str(folder / file), "versions": versions}

    def _ensure_base_export(self, folder: Path, backend: str) -> str:
        file = BASE_FILES[backend]
        if file not in finished_exports(folder):
            model_class = _model_class(self.task)
            # exports on load
            model = model_class(str(folder), backend=cast(STBackend, backend), device="cpu")
            model.save_pretrained(str(folder))
            mark_exported(folder, file)
        return file

    def _ensure_int8_export(self, folder: Path, command: dict[str, Any]) -> str:
        backend, calibration = command["backend"], command.get("calibration")
        suffix, file = int8_file(backend, command.get("onnx_config"), calibration)
        if file in finished_exports(folder):
            return file
        # quantization changes the loaded model in place: this one is thrown away, the export is loaded anew
        base = _load(self.task, folder, backend, BASE_FILES[backend], command["threads"])
        if backend == "onnx":
            from sentence_transformers.backend import export_dynamic_quantized_onnx_model

            export_dynamic_quantized_onnx_model(base, command["onnx_config"], str(folder), file_suffix=suffix)
        else:
            assert calibration is not None  # int8_file refused an OpenVINO export without one
            _export_static_openvino(base, folder, suffix, calibration)
        mark_exported(folder, file)
        return file

    def _texts(self, path: str) -> list[Any]:
        """The texts (or ``(query, document)`` pairs) of a JSON file, read once."""
        if path not in self.texts:
            inputs = json.loads(Path(path).read_text(encoding="utf-8"))
            self.texts[path] = [tuple(pair) for pair in inputs] if self.task == "score" else inputs
        return self.texts[path]

    def _encode(self, texts: list[Any]) -> Any:
        if self.task == "score":  # [num_pairs, 1], as the parent's CrossEncoder.predict reference
            scores = self.model.predict(texts, batch_size=self.batch_size, convert_to_numpy=True)
            return scores.reshape(-1, 1)
        return self.model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True)

    def time(self, texts_path: str, out: str | None) -> dict[str, Any]:
        texts = self._texts(texts_path)
        start = time.perf_counter()
        embeddings = self._encode(texts)
        seconds = time.perf_counter() - start
        if out:
            _save(out, embeddings)
        return {"seconds": seconds, "num_texts": len(embeddings)}

    def embed(self, texts_path: str, out: str) -> dict[str, Any]:
        embeddings = self._encode(self._texts(texts_path))
        _save(out, embeddings)
        return {"num_texts": len(embeddings)}


def _model_class(task: str) -> Any:
    from sentence_transformers import CrossEncoder, SentenceTransformer

    return CrossEncoder if task == "score" else SentenceTransformer


def _load(
    task: str, folder: Path, backend: str, file: str, threads: int, precision_hint: str | None = None
) -> Any:
    if backend == "onnx":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        kwargs = {"file_name": file, "provider": "CPUExecutionProvider", "session_options": options}
    else:
        ov_config: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads}
        if precision_hint is not None:
            ov_config["INFERENCE_PRECISION_HINT"] = precision_hint
        kwargs = {"file_name": file, "ov_config": ov_config}
    model_class = _model_class(task)
    return model_class(str(folder), backend=cast(STBackend, backend), device="cpu", model_kwargs=kwargs)


def _export_static_openvino(base: Any, folder: Path, suffix: str, calibration: dict[str, Any]) -> None:
    """``export_static_quantized_openvino_model`` on the parent's texts: ``dataset_name`` is a local folder
    with one ``calibration.jsonl``, which ``datasets.load_dataset`` reads as its ``default`` config."""
    from optimum.intel import OVQuantizationConfig
    from sentence_transformers.backend import export_static_quantized_openvino_model

    export_static_quantized_openvino_model(
        base,
        OVQuantizationConfig(num_samples=calibration["num_samples"]),
        str(folder),
        dataset_name=calibration["dir"],
        dataset_config_name="default",
        dataset_split="train",
        column_name="text",
        file_suffix=suffix,
    )


def _save(path: str, embeddings: Any) -> None:
    import numpy as np

    np.save(path, np.asarray(embeddings, dtype=np.float32))


def _versions(backend: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in PACKAGES[backend]:
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


def _label(command: dict[str, Any], versions: dict[str, str]) -> str:
    st = f"ST {versions.get('sentence-transformers', '?')}"
    if command.get("task") == "score":
        st += " CrossEncoder"
    if command["backend"] == "onnx":
        engine = f"ONNX Runtime {versions.get('onnxruntime', '?')}"
        precision = f"int8 (dynamic, {command['onnx_config']})" if command["int8"] else "float32"
    else:
        engine = f"OpenVINO {versions.get('openvino', '?')}"
        num = command["calibration"]["num_samples"] if command["int8"] else 0
        precision = f"int8 (static, {num} calibration texts)" if command["int8"] else "float32"
        hint = command.get("precision_hint")
        precision += f" (INFERENCE_PRECISION_HINT {hint})" if hint else " (default precision hint)"
    return f"{st} {engine} {precision} (batch {command['batch_size']})"


def serve(commands: TextIO, answers: TextIO) -> None:
    """Answer each command line until quit or end of input; a failed command answers its error and the worker
    goes on (the parent decides)."""
    worker = Worker()
    for line in commands:
        if not line.strip():
            continue
        try:
            command = parse_command(line)
            answer = {"ok": True} if command["cmd"] == "quit" else {"ok": True, **worker.handle(command)}
        except Exception as e:  # every failure goes back to the parent as an answer
            command, answer = None, {"ok": False, "error": f"{type(e).__name__}: {e}"}
        answers.write(message_line(answer))
        answers.flush()
        if command is not None and command["cmd"] == "quit":
            return


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # library prints (progress bars, warnings) go to stderr, never into the answers
    sys.stdout = sys.stderr
    serve(sys.stdin, answers)


if __name__ == "__main__":
    main()
