"""``wde serve`` turns ``tokenizers``' thread pool off for its processes on a host of 8 cores or more; an
operator's setting wins, and the in-process ``LLM`` keeps the pool."""

from __future__ import annotations

import os

import pytest

from server.process import tokenizer_parallelism
from server.process.tokenizer_parallelism import MIN_CORES, VARIABLE, serial_tokenizer_calls
from wde.engine import tokenizer_pool
from wde.engine.tokenizer_pool import default_tokenizer_workers


def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """No TOKENIZERS_PARALLELISM now, and the session's own value back after the test (setenv records it)."""
    monkeypatch.setenv(VARIABLE, "")
    monkeypatch.delenv(VARIABLE)


def test_set_on_a_many_core_host_when_nothing_chose_it(monkeypatch: pytest.MonkeyPatch) -> None:
    unset(monkeypatch)
    monkeypatch.setattr(tokenizer_pool, "usable_cores", lambda: 16)
    assert default_tokenizer_workers("cuda") == 1  # the pool on: one thread hands it each chunk
    assert serial_tokenizer_calls(num_cores=MIN_CORES)
    assert os.environ[VARIABLE] == "false"
    # the engine's tokenizer threads are then the parallelism on a GPU: the cores minus one
    assert default_tokenizer_workers("cuda") == 15 and default_tokenizer_workers("cpu") == 0


def test_kept_on_a_small_host(monkeypatch: pytest.MonkeyPatch) -> None:
    unset(monkeypatch)
    assert not serial_tokenizer_calls(num_cores=MIN_CORES - 1)
    assert VARIABLE not in os.environ


@pytest.mark.parametrize("value", ["true", "false", "1"])
def test_the_operators_setting_wins(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(VARIABLE, value)
    assert not serial_tokenizer_calls(num_cores=MIN_CORES)
    assert os.environ[VARIABLE] == value


def test_wde_serve_sets_it_before_the_engine_arguments(
    monkeypatch: pytest.MonkeyPatch, default_model_path: str
) -> None:
    """A max length past the bundled model's positions ends serve() with exit 2 after its first step (on a
    host taken for one of 16 cores)."""
    from server.cli import main

    unset(monkeypatch)
    monkeypatch.setattr(tokenizer_parallelism, "usable_cores", lambda: 16)
    assert main(["serve", default_model_path, "--max-model-len", "100000"]) == 2
    assert os.environ[VARIABLE] == "false"
