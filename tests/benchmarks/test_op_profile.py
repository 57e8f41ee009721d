"""benchmarks.op_profile: every event lands in the kind it belongs to, the kinds and the rest add up to the
wall time, and a --smoke run (a tiny BERT, float32 and int8, in a fresh interpreter: the inductor kernel
names are set before anything compiles) names the GEMMs, the attention and the compiled kernels. No timing
is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from benchmarks import op_profile
from benchmarks.peers import REPO_ROOT
from tests.benchmarks.test_shapes import write_inputs

SHARE_ROW = re.compile(r"^\| (?P<kind>[^|]+) \| (?P<seconds>[\d.]+) \| (?P<share>[\d.]+)% \|$")


def shares_of(table: str) -> dict[str, float]:
    """kind -> share (%) of a printed profile's kinds table"""
    return {m["kind"]: float(m["share"]) for line in table.splitlines() if (m := SHARE_ROW.match(line))}


def test_events_fall_into_their_kinds() -> None:
    assert op_profile.kind_of("aten::_int_mm") == "int8 GEMM"
    assert op_profile.kind_of("onednn::qlinear_pointwise") == "int8 GEMM"
    assert op_profile.kind_of("mkldnn::_linear_pointwise") == "float GEMM"
    assert op_profile.kind_of("aten::addmm") == "float GEMM"
    assert op_profile.kind_of(op_profile.ATTENTION_EVENT) == "attention"
    kernel = "graph_6_cpp_fused__to_copy_abs_amax_clamp_clamp_min_div_round_0"
    assert op_profile.kind_of(kernel) == "compiled pointwise kernels"
    assert op_profile.kind_of("aten::native_layer_norm") == "eager pointwise ops"
    # wrappers: their self time is dispatch, part of the rest
    assert op_profile.kind_of("Torch-Compiled Region: 2/0") is None
    assert op_profile.kind_of("## Call CompiledFxGraph fabc ##") is None


def test_what_runs_inside_an_attention_call_is_attention() -> None:
    attention = SimpleNamespace(name=op_profile.ATTENTION_EVENT, cpu_parent=None)
    gather = SimpleNamespace(name="aten::index_select", cpu_parent=attention)
    inner = SimpleNamespace(name="aten::copy_", cpu_parent=gather)
    outside = SimpleNamespace(name="aten::index_select", cpu_parent=None)
    found = [op_profile.inside_attention(event) for event in (attention, gather, inner, outside)]
    assert found == [True, True, True, False]


def test_kinds_and_the_rest_add_up_to_the_wall_time() -> None:
    profile = op_profile.Profile(
        "bert-base",
        "int8",
        num_tokens=1000,
        wall_seconds=10.0,
        self_seconds={"aten::_int_mm": 6.0, "wde::attention": 1.5, "cpp_fused_x_0": 2.0, "Region": 0.1},
    )
    kinds = op_profile.by_kind(profile)
    assert kinds == pytest.approx(
        {"int8 GEMM": 6.0, "attention": 1.5, "compiled pointwise kernels": 2.0, op_profile.OTHER: 0.5}
    )
    shares = shares_of(op_profile.format_profile(profile))
    assert shares["int8 GEMM"] == 60.0 and sum(shares.values()) == pytest.approx(100.0)


@pytest.mark.slow
def test_smoke_run_names_the_gemms_attention_and_kernels(tmp_path) -> None:
    docs, _ = write_inputs(tmp_path)
    command = [sys.executable, "-m", "benchmarks.op_profile", "--smoke", "--data", str(docs), "--threads=1"]
    run = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=True)
    sections = run.stdout.split("### ")[1:]
    names = [section.split(":")[0] for section in sections]
    assert names == ["bert-tiny, quantization none", "bert-tiny, quantization int8"]
    for section, gemm in zip(sections, ("float GEMM", "int8 GEMM"), strict=True):
        shares = shares_of(section)
        assert shares[gemm] > 0 and shares["attention"] > 0, section
        assert sum(shares.values()) == pytest.approx(100.0, abs=0.5)
    assert "compiled pointwise kernels" in sections[1], "int8 layers run compiled"
