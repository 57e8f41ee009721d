"""``make gpu-wheels``: on a machine with PyPI, all that ``make gpu-check`` needs on a GPU machine that has no
network and whose image holds torch 2.11 (CUDA 13), transformers and sentence-transformers but not wde's
server stack. Into ``.gpu-wheels/`` (git-ignored; carried to the GPU machine with the checkout):

- the wheels of the server packages the image lacks (``SERVER_ROOTS``) and of all they require, at the
  versions installed here (the ones our tests ran with), for the image's Python 3.12 on x86-64 Linux, and
  ``requirements.json``: the version range asked of each (``make gpu-check`` installs a carried wheel where
  the machine lacks it or has a version outside that range);
- the bundled all-MiniLM-L6-v2 with its weights in float16 (``all-MiniLM-L6-v2-fp16/``): the package's own
  wheel (83 MB of float32 weights) is over what a call may carry (64 MiB); GPU runs are float16 anyway, and
  every system there (wde, its float32 oracle, sentence-transformers) loads this same folder;
- the texts ``docs.jsonl`` and ``queries.jsonl`` (``data/``): the shared data set beside the checkout does
  not travel.

    python -m benchmarks.gpu_wheels [--dest .gpu-wheels]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.dataset import SHARED_DATA

REPO_ROOT = Path(__file__).resolve().parents[1]
# wde[server]'s packages that the GPU image lacks (per the device notes' package list); the wheels carried are
# these and everything they require (their dependency closure as installed here, markers evaluated for the
# image's Python). The image's own numpy, tokenizers, safetensors, tqdm, httpx, aiohttp, prometheus-client,
# pyyaml, uvloop are used as they are.
SERVER_ROOTS = ("fastapi", "uvicorn", "httptools", "orjson", "pyzmq", "msgspec", "setproctitle")
# what the image is: Python 3.12 on x86-64 Linux
MARKER_ENVIRONMENT = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}
REQUIREMENTS_FILE = "requirements.json"  # {distribution: the version range its dependents ask for}
PYTHON_VERSION = "3.12"
PLATFORMS = (
    *(f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34)),
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
DATA_FILES = ("docs.jsonl", "queries.jsonl", "rerank.jsonl")  # rerank: fp8's MRR@10 (gpu_decoders)
MODEL_DIR_NAME = "all-MiniLM-L6-v2-fp16"
MAX_TOTAL_BYTES = 56 * 2**20  # a device call carries 64 MiB, the checkout (~3.5 MiB tracked) included


def dependency_closure(roots: tuple[str, ...]) -> dict[str, str]:
    """{distribution: the specifiers of every requirement on it within the closure (", "-joined)} for the
    roots and all they require, read from the distributions installed here."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    specifiers: dict[str, list[str]] = {canonicalize_name(root): [] for root in roots}
    pending = list(specifiers)
    while pending:
        distribution = importlib.metadata.distribution(pending.pop())
        for line in distribution.requires or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate(MARKER_ENVIRONMENT):
                continue
            name = canonicalize_name(requirement.name)
            if name not in specifiers:
                specifiers[name] = []
                pending.append(name)
            if str(requirement.specifier):
                specifiers[name].append(str(requirement.specifier))
    return {name: ",".join(dict.fromkeys(specs)) for name, specs in sorted(specifiers.items())}


def download_wheels(dest: Path, distributions: list[str]) -> None:
    """Each distribution at the version installed here (the one our tests ran with), for the image."""
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in distributions]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", PYTHON_VERSION, "--implementation", "cp", "-d", str(dest)]
    for platform_tag in PLATFORMS:
        command += ["--platform", platform_tag]
    subprocess.run([*command, *pins], check=True)


def write_fp16_model(dest: Path) -> Path:
    """The bundled model's folder with ``model.safetensors`` cast to float16 (every other file as it is)."""
    import torch
    from safetensors.torch import load_file, save_file

    from wde.engine_args import default_model_path

    source = Path(default_model_path())
    target = dest / MODEL_DIR_NAME
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("model.safetensors", "README.md"))
    tensors = load_file(str(source / "model.safetensors"))
    half = {name: t.to(torch.float16) if t.is_floating_point() else t for name, t in tensors.items()}
    save_file(half, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


def copy_data(dest: Path) -> None:
    (dest / "data").mkdir(exist_ok=True)
    for name in DATA_FILES:
        shutil.copy(SHARED_DATA / name, dest / "data" / name)


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dest", default=str(REPO_ROOT / ".gpu-wheels"))
    args = parser.parse_args(argv)
    dest = Path(args.dest)
    # 1. a fresh folder: one version of each wheel (two would stop the install there)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    # 2. wheels (and the version ranges asked of each), model, texts
    closure = dependency_closure(SERVER_ROOTS)
    download_wheels(dest, list(closure))
    (dest / REQUIREMENTS_FILE).write_text(json.dumps(closure, indent=1) + "\n")
    model_dir = write_fp16_model(dest)
    missing_data = [name for name in DATA_FILES if not (SHARED_DATA / name).is_file()]
    if missing_data:
        print(
            f"gpu-wheels: {', '.join(missing_data)} not in {SHARED_DATA}: the GPU tests and bench will skip"
        )
    else:
        copy_data(dest)
    # 3. the size check
    total = folder_bytes(dest)
    wheels = sorted(path.name for path in dest.glob("*.whl"))
    print(f"gpu-wheels: {len(wheels)} wheels, {model_dir.name}, data in {dest}: {total / 2**20:.1f} MiB")
    if total > MAX_TOTAL_BYTES:
        print(f"gpu-wheels: over {MAX_TOTAL_BYTES / 2**20:.0f} MiB: a device call carries 64 MiB at most")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
