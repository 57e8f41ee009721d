"""benchmarks.cpu_info: the CPU's model and ISA flags from /proc/cpuinfo text, and the ONNX int8 config the
st-onnx-int8 peer is exported with (avx512_vnni > avx512 > avx2 > arm64)."""

from __future__ import annotations

import pytest

from benchmarks.cpu_info import cpu_flags, cpu_model, isa_flags, onnx_int8_config

X86_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9654 96-Core Processor
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 amx_tile avx_vnni

processor\t: 1
model name\t: AMD EPYC 9654 96-Core Processor
flags\t\t: fpu sse2
"""
ARM_CPUINFO = """processor\t: 0
Features\t: fp asimd evtstrm aes crc32 asimddp
CPU part\t: 0xd0c
"""


def test_model_and_flags_come_from_the_first_cpu() -> None:
    assert cpu_model(X86_CPUINFO) == "AMD EPYC 9654 96-Core Processor"
    flags = cpu_flags(X86_CPUINFO)
    assert {"avx2", "avx512_vnni", "amx_tile"} <= flags
    assert isa_flags(flags) == [
        "amx_tile", "avx2", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512f", "avx_vnni"
    ]  # fmt: skip
    assert "asimd" in cpu_flags(ARM_CPUINFO)


@pytest.mark.parametrize(
    ("flags", "machine", "config"),
    [
        ({"avx2", "avx512f", "avx512bw", "avx512_vnni"}, "x86_64", "avx512_vnni"),
        ({"avx2", "avx512f", "avx512bw"}, "x86_64", "avx512"),
        ({"avx2", "avx512f"}, "x86_64", "avx2"),  # avx512f alone lacks the byte/word ops the config uses
        ({"avx", "avx2"}, "x86_64", "avx2"),
        ({"asimd"}, "aarch64", "arm64"),
    ],
)
def test_onnx_int8_config_takes_the_best_the_cpu_has(flags: set[str], machine: str, config: str) -> None:
    assert onnx_int8_config(flags, machine) == config


def test_onnx_int8_config_refuses_an_old_cpu_by_name() -> None:
    with pytest.raises(ValueError, match="st-onnx-int8 needs avx2"):
        onnx_int8_config({"sse2", "avx"}, "x86_64")
