"""Where wde's forward passes spend their time, op by op (issue 49 item 2): for each shape of the CPU shapes
matrix (``benchmarks.shape_models``) and each ``--quantization``, ``LLM.encode`` of ``--limit`` texts runs
once under ``torch.profiler`` (after a warm-up that compiles), with inductor's generated C++ kernels named
in the trace (``cpp.enable_kernel_profile``) and every attention call recorded as ``wde::attention``.

The table sums the self time of the profiled events by kind (an event inside an attention call counts as
attention): int8 GEMMs (``torch._int_mm``, oneDNN's u8 x s8
linear), float GEMMs (oneDNN / MKL linears and matmuls), attention, the compiled pointwise kernels
(quantization, dequantization + bias + activation, residual + LayerNorm: inductor's ``cpp_fused_*``), the
eager pointwise ops, and the rest (Python, dispatch, embeddings, pooling: the wall time less all of those);
then the largest single entries. Shares are of the profiled wall time, which the profiler inflates by a few
per cent; compare shares, and time speed with ``benchmarks.shapes``.

    python -m benchmarks.op_profile --shapes bert-base --quantization none int8 --limit 128
    python -m benchmarks.op_profile --shapes minilm mpnet bert-large --threads 1
"""

from __future__ import annotations

import argparse
import collections
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from benchmarks.cpu_info import cpu_flags, cpu_model, isa_flags
from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.shape_models import SHAPES, SMOKE_SHAPES, ShapeUnavailableError, shape_folder

ATTENTION_EVENT = "wde::attention"
NUM_TOP_ENTRIES = 8
# (kind, what an event's name starts with or contains), first match wins
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("int8 GEMM", ("aten::_int_mm", "onednn::qlinear_pointwise")),
    ("float GEMM", ("mkldnn::_linear_pointwise", "aten::addmm", "aten::mm", "aten::bmm", "mkl::")),
    ("attention", (ATTENTION_EVENT,)),
    ("compiled pointwise kernels", ("cpp_fused_",)),
    ("eager pointwise ops", ("aten::",)),
)
OTHER = "rest: Python, dispatch, embeddings, pooling"


@dataclass
class Profile:
    shape: str
    quantization: str
    num_tokens: int
    wall_seconds: float
    self_seconds: dict[str, float]  # event name -> summed self time


def kind_of(event_name: str) -> str | None:
    """The kind an event's self time counts under, or None (wrappers whose self time is their dispatch)."""
    for kind, markers in KINDS:
        if any(marker in event_name for marker in markers):
            return kind
    return None


def by_kind(profile: Profile) -> dict[str, float]:
    """Seconds per kind; what no kind claims is the rest of the wall time."""
    seconds: dict[str, float] = collections.defaultdict(float)
    for name, value in profile.self_seconds.items():
        if (kind := kind_of(name)) is not None:
            seconds[kind] += value
    seconds[OTHER] = max(profile.wall_seconds - sum(seconds.values()), 0.0)
    return dict(seconds)


def inside_attention(event: Any) -> bool:
    """Whether a profiler event is an attention call or runs within one (a backend's padding, gathers and
    SDPA calls are the attention's cost)."""
    while event is not None:
        if event.name == ATTENTION_EVENT:
            return True
        event = event.cpu_parent
    return False


def record_attention() -> None:
    """Name every attention call in the trace (an eager op inside compiled layers: patched before load)."""
    import torch

    from wde.layers.attention.layer import Attention

    forward = Attention.forward

    @torch.compiler.disable
    def recorded(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        with torch.profiler.record_function(ATTENTION_EVENT):
            return forward(self, *args, **kwargs)

    Attention.forward = recorded  # type: ignore[method-assign]


def profile_one(shape: str, quantization: str, texts: list[str]) -> Profile:
    import torch

    from wde import LLM

    extra = {} if quantization == "none" else {"quantization": quantization}
    llm = LLM(str(shape_folder(shape)), dtype="float32", **extra)
    try:
        llm.encode(texts)  # warm-up: compiles every batch shape the timed pass meets
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
            start = time.perf_counter()
            outputs = llm.encode(texts)
            wall = time.perf_counter() - start
    finally:
        llm.engine.shutdown()
    self_seconds: dict[str, float] = collections.defaultdict(float)
    for event in profiler.events():  # what runs inside an attention call counts as attention
        name = ATTENTION_EVENT if inside_attention(event) else event.key
        self_seconds[name] += event.self_cpu_time_total / 1e6
    num_tokens = sum(output.num_tokens for output in outputs)
    return Profile(shape, quantization, num_tokens, wall, dict(self_seconds))


def format_profile(profile: Profile) -> str:
    kinds = by_kind(profile)
    wall = profile.wall_seconds
    lines = [
        f"### {profile.shape}, quantization {profile.quantization}: {profile.num_tokens:,} tokens in "
        f"{wall:.2f} s under the profiler",
        "",
        "| kind | seconds | share |",
        "|---|---|---|",
    ]
    lines += [f"| {kind} | {seconds:.3f} | {seconds / wall:.1%} |" for kind, seconds in kinds.items()]
    lines += ["", "| largest entries | kind | seconds | share |", "|---|---|---|---|"]
    top = sorted(profile.self_seconds.items(), key=lambda item: -item[1])[:NUM_TOP_ENTRIES]
    lines += [f"| `{name[:90]}` | {kind_of(name) or '-'} | {s:.3f} | {s / wall:.1%} |" for name, s in top]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=["bert-base"])
    parser.add_argument("--quantization", nargs="+", choices=["none", "int8"], default=["none", "int8"])
    parser.add_argument("--data", default=shared_data_path("docs.jsonl"))
    parser.add_argument("--limit", type=int, default=128, help="texts encoded under the profiler")
    parser.add_argument("--threads", type=int, default=None, help="torch's threads (default: all cores)")
    parser.add_argument("--smoke", action="store_true", help=f"{' '.join(SMOKE_SHAPES[:1])}, 8 texts")
    return parser


def main(argv: Iterable[str] | None = None) -> None:
    args = build_parser().parse_args(None if argv is None else list(argv))
    import torch
    import torch._inductor.config as inductor_config

    if args.threads:
        torch.set_num_threads(args.threads)
    inductor_config.cpp.enable_kernel_profile = True  # before anything compiles
    record_attention()
    shapes, limit = (SMOKE_SHAPES[:1], 8) if args.smoke else (args.shapes, args.limit)
    texts = load_texts(args.data, limit)
    print(f"## Op profile: {cpu_model()}, {torch.get_num_threads()} threads")
    print(f"\n- ISA: {' '.join(isa_flags(cpu_flags()))}; torch {torch.__version__}; {len(texts)} texts\n")
    for shape in shapes:
        for quantization in args.quantization:
            try:
                print(format_profile(profile_one(shape, quantization, texts)), flush=True)
            except ShapeUnavailableError as e:
                print(f"- {shape}: skipped: {e}\n")
                break


if __name__ == "__main__":
    main()
