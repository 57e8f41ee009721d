"""wde/extras.py: a feature asked for without its extra is refused in one line naming the extra; importing
the library or the ``wde`` command imports no extra's package (tests/install builds the real venvs)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from wde.config import SchedulerConfig
from wde.extras import MissingExtraError, require

REPO = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = (
    "zmq",
    "msgspec",
    "setproctitle",
    "fastapi",
    "starlette",
    "uvicorn",
    "orjson",
    "pydantic",
    "httpx",
)


def test_require_names_the_extra_of_a_missing_module() -> None:
    with pytest.raises(MissingExtraError) as raised:
        require("wde_no_such_module", "server", "--tokenizer-processes")
    assert str(raised.value) == (
        "--tokenizer-processes needs wde_no_such_module, which is not installed: pip install 'wde[server]'"
    )
    assert raised.value.name == "wde_no_such_module"
    # the start-up checks that report a bad setting in one line catch ValueError; bulk's callers ImportError
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, ImportError)


def test_require_passes_an_installed_module() -> None:
    require("numpy", "server", "anything")


def test_tokenizer_processes_are_checked_with_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    config = SchedulerConfig(max_num_batched_tokens=None, max_num_seqs=8, tokenizer_processes=1)
    config.verify()  # pyzmq is here (the server extra)
    find_spec = importlib.util.find_spec
    # as if pyzmq were not installed
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "zmq" else find_spec(name))
    with pytest.raises(ValueError, match=r"needs zmq, which is not installed: pip install 'wde\[server\]'"):
        config.verify()


def test_importing_the_library_and_the_command_imports_no_server_package() -> None:
    script = (
        "import json, sys; import wde; from wde import LLM; import wde.bulk; import server.cli; "
        f"print(json.dumps(sorted(set({SERVER_PACKAGES!r}) & set(sys.modules))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
