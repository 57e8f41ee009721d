"""max_num_batched_tokens="auto" from made-up memory profiles."""

from __future__ import annotations

import pytest

from wde.worker.memory_budget import ChosenBudget, MemoryProfile, choose_token_budget

GIB = 2**30
MIB = 2**20


def profile(total_gib: float, weight_mib: float, activation_mib: float, num_tokens: int) -> MemoryProfile:
    return MemoryProfile(int(total_gib * GIB), int(weight_mib * MIB), int(activation_mib * MIB), num_tokens)


def test_budget_fills_the_memory_share() -> None:
    # 80 GiB card, 30% share = 24 GiB, minus 1 GiB of weights = 23 GiB; 1 MiB per token -> 23,552 tokens
    budget = choose_token_budget(profile(80, 1024, 8192, 8192), 0.3, 512, 65536)
    assert budget.max_num_batched_tokens == 23552
    assert "limited by memory" in budget.reason and "1024.0 KiB of activations per token" in budget.reason


def test_budget_is_capped_and_aligned() -> None:
    budget = choose_token_budget(profile(80, 100, 64, 8192), 0.9, 512, 65536)
    assert budget.max_num_batched_tokens == 65536 and "limited by the cap of 65536 tokens" in budget.reason
    budget = choose_token_budget(profile(8, 100, 8192, 8192), 0.3, 512, 65536)
    assert budget.max_num_batched_tokens % 256 == 0


def test_budget_never_below_one_max_length_sequence_and_errors_when_that_cannot_fit() -> None:
    budget = choose_token_budget(profile(16, 1000, 8192 * 8, 8192), 0.5, 700, 65536)
    assert budget.max_num_batched_tokens >= 700
    with pytest.raises(ValueError, match=r"fewer than max_model_len \(8192\).*--gpu-memory-utilization"):
        choose_token_budget(profile(4, 1000, 8192 * 2, 8192), 0.3, 8192, 65536)
    with pytest.raises(ValueError, match=r"weights .* do not fit"):
        choose_token_budget(profile(4, 4000, 10, 8192), 0.3, 512, 65536)


def test_auto_budget_on_cpu_uses_the_measured_profile() -> None:
    from wde import LLM

    llm = LLM(max_num_batched_tokens="auto")
    scheduler_config = llm.engine.engine_config.scheduler_config
    assert scheduler_config.max_num_batched_tokens == 2048  # the CPU cap: memory is not the limit here
    assert "KiB of activations per token" in scheduler_config.budget_reason
    assert llm.engine.runner.memory_profile.peak_activation_bytes > 0
    # the runner returned its choice: the config it was given still says "auto"
    assert llm.engine.runner.engine_config.scheduler_config.max_num_batched_tokens is None
    assert llm.engine.runner.budget.max_num_batched_tokens == 2048


def test_a_fixed_budget_is_returned_with_the_configs_reason() -> None:
    from wde import LLM

    llm = LLM(max_num_batched_tokens=512)
    assert llm.engine.runner.budget == ChosenBudget(512, "set explicitly")
    assert llm.engine.engine_config.scheduler_config.max_num_batched_tokens == 512
