"""``wde serve`` bounds libgomp's idle spin before torch loads; an operator's setting wins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
PROBE = (
    "import os, sys\n"
    "{before}\n"
    "from server.process.openmp_spin import bound_openmp_spin\n"
    "print(bound_openmp_spin(), os.environ.get('GOMP_SPINCOUNT'))\n"
)


def run_python(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_sets_the_server_spin_count_when_nothing_chose_one() -> None:
    assert run_python(PROBE.format(before="")) == "True 10000"


@pytest.mark.parametrize(
    ("env", "expected"),
    [({"GOMP_SPINCOUNT": "500"}, "False 500"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "False None")],
)
def test_the_operators_setting_wins(env: dict[str, str], expected: str) -> None:
    assert run_python(PROBE.format(before=""), **env) == expected


def test_too_late_once_torch_is_loaded() -> None:
    assert run_python(PROBE.format(before="import torch")) == "False None"


def test_wde_serve_sets_it_before_anything_loads_torch(default_model_path: str) -> None:
    # an import hook notes GOMP_SPINCOUNT when torch is first imported; a max length past the bundled model's
    # positions ends serve() early (exit 2), after the platform (torch) is loaded to check the flags (reading
    # the model folder alone imports no torch)
    code = (
        "import os, sys\n"
        "seen = []\n"
        "class Hook:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' and not seen:\n"
        "            seen.append(os.environ.get('GOMP_SPINCOUNT'))\n"
        "        return None\n"
        "sys.meta_path.insert(0, Hook())\n"
        "from server.cli import main\n"
        f"main(['serve', {default_model_path!r}, '--max-model-len', '100000'])\n"
        "print(seen[0] if seen else 'torch not imported')\n"
    )
    assert run_python(code) == "10000"
    serve = f"main(['serve', {default_model_path!r}, '--max-model-len', '100000'])"
    assert run_python(code.replace(serve, "import torch")) == "None"
