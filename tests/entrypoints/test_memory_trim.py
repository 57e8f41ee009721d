"""After a burst of long inputs, the idle engine gives its heap's free pages back (RSS near the loaded
size, not the high-water mark). Measured in a fresh process so other tests' models do not count."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_IDLE_RSS_MIB = 800  # generous: ~450 MiB measured after the trim, ~560 before, ~1 GiB reported

MEASURE = """
import json
from wde import LLM

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

llm = LLM()
texts = [" ".join(f"word{i}x{j}" for j in range(300)) for i in range(64)]  # 256 tokens each (truncated)
llm.engine.memory_trimmer.min_interval_seconds = 0.0
llm.engine.memory_trimmer.min_tokens = 1 << 60  # no trim at the end of encode: measure before and after
llm.encode(texts)
before = rss_mib()
llm.engine.memory_trimmer.min_tokens = 1
llm.engine.on_idle()
print(json.dumps({"before": before, "after": rss_mib(), "num_trims": llm.engine.memory_trimmer.num_trims}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; malloc_trim is glibc's")
@pytest.mark.slow  # a fresh process, bursts of long inputs
def test_idle_engine_returns_the_memory_of_long_batches() -> None:
    result = subprocess.run(
        [sys.executable, "-c", MEASURE], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["num_trims"] == 1, figures
    assert figures["after"] <= figures["before"] and figures["after"] < MAX_IDLE_RSS_MIB, figures
