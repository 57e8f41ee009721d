"""`make docker-check`: build docker/Dockerfile.cpu and run the image as operators do (a read-only root
filesystem, a tmpfs /tmp, volumes at /models and /data: the README's `docker run`), then hold its answers
against the in-process LLM and stop it with SIGTERM under load. `make docker-check-cuda` (--cuda) does the
same with docker/Dockerfile.cuda, on this machine's CPU: `--device cpu` after the image name, as an operator
without a GPU would. One line per step; exit 0 when all pass, 1 at the first that fails, 2 when this
machine has no container engine.

    python docker/check.py [--cuda] [--engine docker|podman] [--dockerfile PATH] [--build-only] [--image TAG]
                           [--git-ref REF]

--git-ref builds (and compares against) a clean `git archive REF` instead of the working tree, for a tree
that others edit meanwhile.

 1. engine   docker when its daemon answers, else podman (its builds use --isolation=chroot, which needs
             no container runtime)
 2. base     BASE_IMAGE (python:3.11-slim, both images) present, or pulled, or (no registry reachable) made
             from Debian packages by docker/local_base.sh under the same tag
 3. torch    TORCH_INDEX_URL: PyTorch's CPU index, or this machine's own pip serving the pinned CPU wheel;
             --cuda: PyPI (the Dockerfile's default), which lists the pinned torch's CUDA wheel
 4. build    the Dockerfile (--build-only stops here)
 5. size     the image's uncompressed size (ENGINE image inspect)
 6. no-gpu   --cuda: the image as built (its default --device cuda) with no GPU visible here exits 2 with
             one line that names `docker run --gpus all` and `--device cpu`, and the CUDA build of torch
 7. run      `ENGINE run --read-only --tmpfs /tmp -v ... IMAGE [--device cpu]`, or where no container
             runtime works, the image's filesystem itself (docker/image_run.py's ChrootRun), said in the line
 8. health   GET /health answers 200
 9. embed    POST /embed of 20 texts of docs.jsonl equals LLM.encode
10. rerank   POST /rerank of a rerank.jsonl query over 20 documents equals LLM.rerank
11. batch    GET /v1/files answers 200: the Batch API writes to the /data volume
12. drain    SIGTERM with requests in flight: every accepted one answered, exit code 0
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from image_run import ChrootRun, ContainerRun, ImageRun, image_config
from torch_index import TorchIndex

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
BASE_IMAGE = "python:3.11-slim"
NUM_TEXTS = 20
TOLERANCE = 1e-5  # max |difference| of embeddings and scores (float32, the same torch on the same CPU)
BUILD_TIMEOUT = 3600.0  # the CUDA image downloads ~3 GB of wheels
HEALTH_TIMEOUT = 180.0
NO_GPU_TIMEOUT = 120.0
NUM_DRAIN_REQUESTS = 24
TEXTS_PER_DRAIN_REQUEST = 2  # light enough to finish within --graceful-timeout (30 s) on a loaded 2-core box
UID = 10001


class CheckFailed(Exception):
    pass


def step(name: str, line: str) -> None:
    print(f"docker-check: {name:<7} {line}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cuda", action="store_true", help="check docker/Dockerfile.cuda, run here with --device cpu"
    )
    parser.add_argument("--engine", choices=("docker", "podman"), help="default: the first that works here")
    parser.add_argument("--dockerfile", help="default: docker/Dockerfile.cpu (--cuda: Dockerfile.cuda)")
    parser.add_argument("--image", help="default: wde:check (--cuda: wde:check-cuda)")
    parser.add_argument("--base-image", default=BASE_IMAGE)
    parser.add_argument("--build-only", action="store_true", help="stop after the build")
    parser.add_argument("--git-ref", help="build `git archive GIT_REF` instead of the working tree")
    args = parser.parse_args(argv)
    args.dockerfile = args.dockerfile or ("docker/Dockerfile.cuda" if args.cuda else "docker/Dockerfile.cpu")
    args.image = args.image or ("wde:check-cuda" if args.cuda else "wde:check")
    engine = args.engine or find_engine()
    if engine is None:
        print(
            "docker-check: no container engine: neither docker (a running daemon) nor podman answers here; "
            "install one (apt-get install podman)"
        )
        return 2
    step("engine", f"{engine} ({version_of(engine)})")
    work = Path(tempfile.mkdtemp(prefix="wde-docker-check."))
    try:
        run_checks(engine, args, work)
    except CheckFailed as e:
        print(f"docker-check: FAILED: {e}", flush=True)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("docker-check: passed", flush=True)
    return 0


def run_checks(engine: str, args: argparse.Namespace, work: Path) -> None:
    # 2.-5. the image, from the working tree or a clean export of a commit
    context = REPO if args.git_ref is None else export(args.git_ref, work / "context")
    base_image = ensure_base(engine, args.base_image)
    torch_index, line = open_torch_index(args.cuda, work)
    step("torch", line)
    try:
        build(engine, context, args.dockerfile, args.image, base_image, torch_index, work)
    finally:
        torch_index.close()
    report_size(engine, args.image)
    if args.build_only:
        return
    # 6.-12. the server, run as the README says
    port = free_port()
    models, data = work / "models", work / "data"
    for folder in (models, data):
        folder.mkdir()
        shutil.chown(folder, UID, UID)
    if args.cuda:
        check_no_gpu(engine, args.image, port, models, data, work / "no-gpu.log")
    serve_args = ["--device", "cpu"] if args.cuda else []
    run, line = start(engine, args.image, port, models, data, work / "serve.log", serve_args)
    step("run", line)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(run, url)
        compare_with_llm(url, context)
        check_batch_api(url)
        drain(run, url)
    except CheckFailed as e:
        tail = "\n".join(run.logs().splitlines()[-15:])
        raise CheckFailed(f"{e}\n--- the server's last lines ---\n{tail}") from None
    finally:
        run.close()


# ---- the image ----------------------------------------------------------------------------------------
def find_engine() -> str | None:
    for engine in ("docker", "podman"):
        if shutil.which(engine) and subprocess.run([engine, "info"], capture_output=True).returncode == 0:
            return engine
    return None


def version_of(engine: str) -> str:
    done = subprocess.run([engine, "--version"], capture_output=True, text=True)
    return done.stdout.strip()


def ensure_base(engine: str, base_image: str) -> str:
    if subprocess.run([engine, "image", "inspect", base_image], capture_output=True).returncode == 0:
        step("base", f"{base_image}: present")
        return base_image
    if subprocess.run([engine, "pull", base_image], capture_output=True).returncode == 0:
        step("base", f"{base_image}: pulled")
        return base_image
    started = time.monotonic()
    done = subprocess.run(
        [str(REPO / "docker" / "local_base.sh"), engine, base_image], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise CheckFailed(f"base: {base_image} cannot be pulled nor made locally: {done.stderr.strip()}")
    step(
        "base",
        f"{base_image}: no registry answers; {done.stdout.strip()} ({time.monotonic() - started:.0f} s)",
    )
    return base_image


def open_torch_index(cuda: bool, work: Path) -> tuple[TorchIndex, str]:
    try:
        if cuda:
            return TorchIndex.pypi(REPO / "constraints.txt", "3.11")
        return TorchIndex.open(REPO / "constraints.txt", work / "torch-index", "3.11")
    except (RuntimeError, ValueError) as e:
        raise CheckFailed(f"torch: {e}") from e


def export(ref: str, folder: Path) -> Path:
    folder.mkdir()
    archive = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", ref], cwd=REPO, capture_output=True, text=True)
    step("source", f"git archive {ref} ({commit.stdout.strip()}), not the working tree")
    return folder


def build(
    engine: str,
    context: Path,
    dockerfile: str,
    image: str,
    base_image: str,
    torch_index: TorchIndex,
    work: Path,
) -> None:
    command = [engine, "build", "--network=host", "-f", dockerfile, "-t", image]
    if engine == "podman":
        command.append("--isolation=chroot")  # no container runtime needed for RUN steps
    for build_arg in (f"BASE_IMAGE={base_image}", f"TORCH_INDEX_URL={torch_index.url}"):
        command += ["--build-arg", build_arg]
    log_path = work / "build.log"
    started = time.monotonic()
    with log_path.open("w") as log:
        try:
            done = subprocess.run(
                [*command, "."], cwd=context, stdout=log, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT
            )
        except subprocess.TimeoutExpired as e:
            raise CheckFailed(f"build: {dockerfile} did not build within {BUILD_TIMEOUT:.0f} s") from e
    if done.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
        raise CheckFailed(f"build: {' '.join(command)} . exited {done.returncode}:\n{tail}")
    step("build", f"{dockerfile} -> {image} in {time.monotonic() - started:.0f} s")


def report_size(engine: str, image: str) -> None:
    done = subprocess.run(
        [engine, "image", "inspect", "--format", "{{.Size}}", image], capture_output=True, text=True
    )
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        raise CheckFailed(f"size: {engine} image inspect {image} answered: {done.stderr.strip()}")
    size = int(done.stdout.strip())
    step("size", f"{image}: {size / 1e9:.2f} GB uncompressed ({size:,} bytes, {engine} image inspect)")


# ---- the server ---------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(
    engine: str, image: str, port: int, models: Path, data: Path, log_path: Path, args: list[str]
) -> tuple[ImageRun, str]:
    """(the running image, how it runs: the `run` step's line)"""
    volumes = "-v MODELS:/models -v DATA:/data"
    try:
        run: ImageRun = ContainerRun.start(engine, image, port, models, data, log_path, args)
        return run, f"{run.description} {volumes} -p 127.0.0.1:{port}:8000 {' '.join([image, *args])}"
    except RuntimeError as e:
        if engine != "podman":
            raise CheckFailed(f"run: {engine} cannot run the image: {e}") from e
        reason = str(e)
    run = ChrootRun.start(image, port, models, data, log_path, args)
    command = " ".join([*(image_config(engine, image).get("Entrypoint") or []), *args])
    return run, (
        f"no container runtime works here ({reason}); running the image's filesystem directly: "
        f"{run.description}, {volumes}, `{command}` on port {port}"
    )


def check_no_gpu(engine: str, image: str, port: int, models: Path, data: Path, log_path: Path) -> None:
    """The CUDA image as built (WDE_DEVICE=cuda) where no GPU is visible: exit 2 with one line."""
    run, _ = start(engine, image, port, models, data, log_path, [])
    try:
        code = run.wait(timeout=NO_GPU_TIMEOUT)
        lines = run.logs().strip().splitlines()
    except subprocess.TimeoutExpired as e:
        raise CheckFailed(f"no-gpu: the image still runs {NO_GPU_TIMEOUT:.0f} s after start (no GPU)") from e
    finally:
        run.close()
    said = " | ".join(lines)
    expected = ("no CUDA device is visible", "--gpus all", "--device cpu")
    if code != 2 or len(lines) != 1 or not all(words in said for words in expected):
        raise CheckFailed(f"no-gpu: exit code {code}, {len(lines)} lines: {said[-2000:]}")
    step("no-gpu", f"{image} (its default --device cuda), no GPU visible: exit code 2, one line: {said}")


def wait_healthy(run: ImageRun, url: str) -> None:
    started = time.monotonic()
    while time.monotonic() - started < HEALTH_TIMEOUT:
        code = run.exit_code()
        if code is not None:
            raise CheckFailed(f"health: the server exited with code {code} before /health answered 200")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
                if answer.status == 200:
                    step("health", f"GET /health 200 after {time.monotonic() - started:.1f} s")
                    return
        except (OSError, urllib.error.HTTPError):
            pass
        time.sleep(0.25)
    raise CheckFailed(f"health: /health did not answer 200 within {HEALTH_TIMEOUT:.0f} s")


def post(url: str, body: dict[str, Any], timeout: float = 120.0) -> tuple[int, Any]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def read_jsonl(name: str, limit: int) -> list[dict[str, Any]]:
    with (DATA / name).open() as lines:
        return [json.loads(line) for _, line in zip(range(limit), lines, strict=False)]


def compare_with_llm(url: str, context: Path) -> None:
    sys.path.insert(0, str(context))  # the code the image was built from
    from wde import LLM

    llm = LLM()
    texts = [record["text"] for record in read_jsonl("docs.jsonl", NUM_TEXTS)]
    status, served = post(f"{url}/embed", {"inputs": texts})
    if status != 200:
        raise CheckFailed(f"embed: POST /embed answered {status}: {served}")
    expected = np.stack([output.embedding for output in llm.encode(texts)])  # [NUM_TEXTS, hidden_size]
    diff = float(np.abs(np.asarray(served, dtype=np.float32) - expected).max())
    verdict(diff, "embed", f"POST /embed of {len(texts)} texts of docs.jsonl vs LLM.encode")
    record = read_jsonl("rerank.jsonl", 1)[0]
    documents = record["documents"][:NUM_TEXTS]
    status, ranked = post(f"{url}/rerank", {"query": record["query"], "texts": documents})
    if status != 200:
        raise CheckFailed(f"rerank: POST /rerank answered {status}: {ranked}")
    reference = {result.index: result.score for result in llm.rerank(record["query"], documents)}
    diff = max(abs(item["score"] - reference[item["index"]]) for item in ranked)
    verdict(diff, "rerank", f"POST /rerank of 1 query over {len(documents)} documents vs LLM.rerank")


def verdict(diff: float, name: str, what: str) -> None:
    line = f"{what}: max |difference| {diff:.2e} (tolerance {TOLERANCE:.0e})"
    if diff > TOLERANCE:
        raise CheckFailed(f"{name}: {line}")
    step(name, line)


def check_batch_api(url: str) -> None:
    try:
        with urllib.request.urlopen(f"{url}/v1/files", timeout=30) as answer:
            status = answer.status
    except urllib.error.HTTPError as e:
        raise CheckFailed(
            f"batch: GET /v1/files answered {e.code}: {e.read().decode(errors='replace')}"
        ) from e
    step(
        "batch",
        f"GET /v1/files {status}: the Batch API writes to the /data volume (WDE_BATCH_DIR=/data/batches)",
    )


def drain(run: ImageRun, url: str) -> None:
    """NUM_DRAIN_REQUESTS concurrent /embed requests; SIGTERM once the first is answered. Every request the
    server accepted must be answered 200 (none cut off at --graceful-timeout, none reset); one that arrives
    once the drain began may be refused (503 naming another replica, or the connection refused)."""
    size = TEXTS_PER_DRAIN_REQUEST
    texts = [record["text"] for record in read_jsonl("docs.jsonl", NUM_DRAIN_REQUESTS * size)]
    answered = threading.Event()

    def one(index: int) -> str:
        try:
            status, body = post(f"{url}/embed", {"inputs": texts[index * size : (index + 1) * size]}, 90)
        except urllib.error.URLError as e:
            if isinstance(e.reason, ConnectionRefusedError):
                return "refused (connection)"
            return f"lost ({e.reason})"
        except OSError as e:  # reset or closed mid-answer
            return f"lost ({e})"
        answered.set()
        if status == 503 and "shutting down" in str(body):
            return "refused 503 (arrived while draining)"
        if status == 503:
            return "cut off 503"  # still running at --graceful-timeout
        return "answered 200" if status == 200 else f"lost (status {status})"

    with ThreadPoolExecutor(NUM_DRAIN_REQUESTS) as pool:
        futures = [pool.submit(one, index) for index in range(NUM_DRAIN_REQUESTS)]
        answered.wait(timeout=60)
        num_in_flight = sum(not future.done() for future in futures)
        signalled = time.monotonic()
        run.terminate()
        outcomes = [future.result() for future in futures]
    code = run.wait(timeout=90)
    seconds = time.monotonic() - signalled
    counts = {outcome: outcomes.count(outcome) for outcome in sorted(set(outcomes))}
    line = (
        f"SIGTERM with {num_in_flight} of {NUM_DRAIN_REQUESTS} requests in flight: "
        + ", ".join(f"{count} {outcome}" for outcome, count in counts.items())
        + f"; exit code {code} {seconds:.1f} s after the signal"
    )
    lost = [outcome for outcome in outcomes if not outcome.startswith(("answered", "refused"))]  # or cut off
    if code != 0 or lost or num_in_flight == 0:
        raise CheckFailed(f"drain: {line}")
    step("drain", line)


if __name__ == "__main__":
    sys.exit(main())
