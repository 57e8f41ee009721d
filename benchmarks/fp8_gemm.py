"""Where an fp8 decoder layer's time goes, on a GPU (issue 51): for each linear of a Qwen3 shape (q/k/v fused,
o, gate/up fused, down) at one step's tokens, the 16-bit GEMM beside ``Fp8Linear``'s parts: the per-token
quantization as PyTorch ops and as the Triton kernel, ``torch._scaled_mm`` with row-wise scales (16-bit and
bfloat16 output) and with one scale per tensor, and the whole ``Fp8Linear`` forward. CUDA events, median of
the timed calls after warm-up, each call alone (no CUDA graph).

    python -m benchmarks.fp8_gemm --shape qwen3-0.6b          # a CUDA machine; gpu_decoders prints it too
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.random_decoder import DECODER_SHAPES

NUM_TOKENS = 8192  # the engine's default max_num_batched_tokens on a GPU: one full step
NUM_WARMUP, NUM_TIMED = 3, 20


def linear_shapes(shape: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Each block linear's (in_features, out_features), as wde fuses them."""
    hidden, head_size = shape["hidden_size"], shape["head_dim"]
    q_size, kv_size = shape["num_attention_heads"] * head_size, shape["num_key_value_heads"] * head_size
    intermediate = shape["intermediate_size"]
    return {
        "qkv": (hidden, q_size + 2 * kv_size),
        "o": (q_size, hidden),
        "gate_up": (hidden, 2 * intermediate),
        "down": (intermediate, hidden),
    }


def time_us(call: Callable[[], object]) -> float:
    """Median microseconds of one call (CUDA events around each)."""
    for _ in range(NUM_WARMUP):
        call()
    samples = []
    for _ in range(NUM_TIMED):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000)
    return statistics.median(samples)


def row_timings(in_features: int, out_features: int, dtype: torch.dtype) -> dict[str, float | None]:
    """One linear's timings in µs (None: that call is refused by this torch / GPU)."""
    from wde.layers.quantization import fp8_rows_kernel
    from wde.layers.quantization.fp8_linear import Fp8Linear, quantize_fp8_rows_reference

    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(NUM_TOKENS, in_features, device="cuda", generator=generator).to(dtype)
    linear = torch.nn.Linear(in_features, out_features, bias=False, device="cuda", dtype=dtype)
    layer = Fp8Linear.from_linear(linear)
    x_q, x_scale = fp8_rows_kernel.quantize_fp8_rows(x)
    weight_t, weight_scale = layer.weight.t(), layer.weight_scale
    one = torch.ones((), device="cuda")

    def scaled_mm(out_dtype: torch.dtype, rowwise: bool = True) -> Callable[[], object]:
        scale_a, scale_b = (x_scale, weight_scale) if rowwise else (one, one)
        return lambda: torch._scaled_mm(x_q, weight_t, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)

    calls: dict[str, Callable[[], object]] = {
        "16-bit GEMM": lambda: torch.mm(x, linear.weight.t()),
        "quantize: PyTorch ops": lambda: quantize_fp8_rows_reference(x),
        "quantize: Triton": lambda: fp8_rows_kernel.quantize_fp8_rows(x),
        f"_scaled_mm row-wise, {str(dtype)[6:]} out": scaled_mm(dtype),
        "_scaled_mm row-wise, bfloat16 out": scaled_mm(torch.bfloat16),
        "_scaled_mm per tensor, bfloat16 out": scaled_mm(torch.bfloat16, rowwise=False),
        "Fp8Linear forward": lambda: layer(x),
    }
    timings: dict[str, float | None] = {}
    for name, call in calls.items():
        try:
            timings[name] = time_us(call)
        except RuntimeError:
            timings[name] = None
    return timings


def gemm_lines(shape_name: str, dtype: torch.dtype = torch.float16) -> list[str]:
    """The markdown table: a row per linear, a column per timing (µs, and the 16-bit GEMM's TFLOP/s)."""
    shapes = linear_shapes(DECODER_SHAPES[shape_name])
    with torch.inference_mode():  # no autograd records around the 16-bit GEMM's parameter
        timed = {name: row_timings(*sizes, dtype) for name, sizes in shapes.items()}
    columns = list(next(iter(timed.values())))
    lines = [
        f"fp8 parts of {shape_name}'s linears, {NUM_TOKENS} tokens, µs a call (median of {NUM_TIMED}):",
        "",
        "| linear (in x out) | " + " | ".join(columns) + " | 16-bit TFLOP/s |",
        "|---|" + "---|" * (len(columns) + 1),
    ]
    for name, timings in timed.items():
        in_features, out_features = shapes[name]
        cells = [f"{value:,.1f}" if value is not None else "refused" for value in timings.values()]
        gemm_us = timings["16-bit GEMM"] or float("nan")
        tflops = 2 * NUM_TOKENS * in_features * out_features / gemm_us / 1e6
        lines.append(
            f"| {name} ({in_features} x {out_features}) | " + " | ".join(cells) + f" | {tflops:,.0f} |"
        )
    return [*lines, ""]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="qwen3-0.6b", choices=sorted(DECODER_SHAPES))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.fp8_gemm needs a CUDA device")
    print("\n".join(gemm_lines(args.shape)))


if __name__ == "__main__":
    main()
