"""The output-kind table (``wde/output_kinds.py``, torch-free) and the pooler's head builders
(``OUTPUT_HEADS``, a dict of callables) name the same kinds."""

from __future__ import annotations

import subprocess
import sys

from wde.layers.pooler.poolers import OUTPUT_HEADS
from wde.output_kinds import OUTPUT_KINDS


def test_every_output_kind_has_a_head_builder_and_no_builder_lacks_a_kind() -> None:
    assert list(OUTPUT_HEADS) == list(OUTPUT_KINDS)
    assert all(callable(builder) for builder in OUTPUT_HEADS.values())


def test_the_kind_table_imports_no_torch() -> None:
    """The HTTP server and the config read the kinds without loading torch."""
    code = "import sys, wde.output_kinds; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
