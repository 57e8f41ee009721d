"""Where a decoder's GPU time goes, kernel by kind (issue 51): ``LLM.encode`` of the texts once under
``torch.profiler`` (after a warm-up pass, CUDA graphs off so that every kernel shows in the trace), each
kernel's device time summed by kind: GEMMs (16-bit and fp8), attention, wde's Triton kernels (fused decoder
ops, fp8 quantization), copies, and the other elementwise kernels. ``benchmarks.gpu_decoders`` prints one
table per configuration of the 0.6B shape beside its throughput rows (the GPU run); on a CPU (``--smoke``)
the same code sums the CPU ops' self time, so that the path is tested without a GPU.
"""

from __future__ import annotations

import collections
import re
from typing import Any

NUM_TOP_KERNELS = 6
# (kind, pattern searched in a kernel's lower-cased name), first match wins
KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fp8 GEMM", re.compile(r"f8f8|e4m3|fp8.*gemm|scaled_mm")),
    ("GEMM", re.compile(r"gemm|xmma|cutlass|cublas|sm90_|sm80_|aten::mm|aten::addmm|aten::linear")),
    ("attention", re.compile(r"flash|fmha|attention|attn|sdpa")),
    ("wde Triton kernels", re.compile(r"_add_rms_norm|_qk_norm_rotary|_act_and_mul|_quantize_rows")),
    ("copies", re.compile(r"memcpy|memset|copy")),
)
OTHER = "other kernels (elementwise, reductions, embeddings, pooling)"


def kind_of(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, pattern in KINDS if pattern.search(lowered)), OTHER)


def kernel_seconds(
    model: str, texts: list[str], device: str, dtype: str, **engine_args: Any
) -> dict[str, float]:
    """Each kernel's (on a CPU: each op's) summed self time over one profiled ``LLM.encode`` of ``texts``."""
    import torch

    from wde import LLM

    llm = LLM(model, device=device, dtype=dtype, cuda_graph_mode="none", **engine_args)
    try:
        llm.encode(texts)  # warm-up: Triton compiles, the allocator settles
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as profiler:
            llm.encode(texts)
            if device == "cuda":
                torch.cuda.synchronize()
    finally:
        llm.engine.shutdown()
    seconds: dict[str, float] = collections.defaultdict(float)
    for event in profiler.key_averages():
        if device == "cuda":
            if event.device_type == torch.autograd.DeviceType.CUDA:
                seconds[event.key] += event.self_device_time_total / 1e6
        elif event.self_cpu_time_total:
            seconds[event.key] += event.self_cpu_time_total / 1e6
    return dict(seconds)


def profile_lines(label: str, seconds: dict[str, float]) -> list[str]:
    """A markdown table of the kinds' seconds and shares, then the largest kernels."""
    total = sum(seconds.values()) or float("nan")
    kinds: dict[str, float] = collections.defaultdict(float)
    for name, value in seconds.items():
        kinds[kind_of(name)] += value
    lines = [
        f"Kernel time of {label}: {total * 1000:,.1f} ms a pass",
        "",
        "| kind | ms | share |",
        "|---|---|---|",
    ]
    lines += [
        f"| {kind} | {value * 1000:,.1f} | {value / total:.1%} |"
        for kind, value in sorted(kinds.items(), key=lambda item: -item[1])
    ]
    top = sorted(seconds.items(), key=lambda item: -item[1])[:NUM_TOP_KERNELS]
    lines += ["", "| largest kernels | kind | ms |", "|---|---|---|"]
    lines += [f"| `{name[:80]}` | {kind_of(name)} | {value * 1000:,.2f} |" for name, value in top]
    return [*lines, ""]
