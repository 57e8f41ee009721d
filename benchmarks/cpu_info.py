"""The CPU a benchmark ran on, read from ``/proc/cpuinfo``: its model name, the ISA flags that decide matmul
speed (AVX2, AVX-512*, AMX*, AVX-VNNI), and the ONNX Runtime int8 config that suits them."""

from __future__ import annotations

import platform
import re
from pathlib import Path

from wde.platforms.cpu_flags import parse_cpu_flags

CPUINFO = Path("/proc/cpuinfo")
# the flags that matter for float32 / bfloat16 / int8 matmuls
ISA_PATTERN = re.compile(r"^(avx2|avx512.*|amx.*|avx_vnni.*)$")
ARM_MACHINES = ("aarch64", "arm64")


def cpuinfo_text() -> str:
    try:
        return CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def cpu_model(text: str | None = None) -> str:
    """The first ``model name`` line (x86) or ``Model`` / ``CPU part`` line (ARM); else platform's answer."""
    text = cpuinfo_text() if text is None else text
    for key in ("model name", "Model", "Hardware"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if match:
            return match.group(1).strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_flags(text: str | None = None) -> set[str]:
    """Every flag of the first CPU (``flags`` on x86, ``Features`` on ARM), as wde's speed paths read them."""
    return set(parse_cpu_flags(cpuinfo_text() if text is None else text))


def isa_flags(flags: set[str]) -> list[str]:
    """The matmul-relevant subset of ``flags``, sorted."""
    return sorted(flag for flag in flags if ISA_PATTERN.match(flag))


def onnx_int8_config(flags: set[str], machine: str | None = None) -> str:
    """The name of sentence-transformers' ONNX dynamic int8 config for this CPU, best first: avx512_vnni (VNNI
    int8 dot products), avx512, avx2, arm64. Raises ``ValueError`` on a CPU none of them fits."""
    machine = (machine or platform.machine()).lower()
    if "avx512_vnni" in flags:
        return "avx512_vnni"
    if "avx512f" in flags and "avx512bw" in flags:
        return "avx512"
    if "avx2" in flags:
        return "avx2"
    if machine in ARM_MACHINES:
        return "arm64"
    raise ValueError(
        f"no ONNX int8 config fits this CPU ({machine}, ISA flags: {' '.join(isa_flags(flags)) or 'none'}); "
        "st-onnx-int8 needs avx2, avx512 or an arm64 CPU"
    )
