"""``max_num_batched_tokens="auto"``: the largest token budget whose activations fit the memory share.

The runner measures one worst-case batch (``profile_run``); this module turns that measurement into a
``ChosenBudget``, which ``runner.initialize()`` returns to the engine (the runner writes no config). Pure
arithmetic, so it is tested with made-up profiles.
"""

from __future__ import annotations

from dataclasses import dataclass

# Budgets are rounded down to a multiple of this (when larger), so CUDA-graph buckets line up.
BUDGET_ALIGNMENT = 256


@dataclass(frozen=True)
class ChosenBudget:
    """The token budget a runner runs with, and why: as configured (``SchedulerConfig.budget_reason``), or
    sized from the profile run for ``max_num_batched_tokens="auto"``."""

    max_num_batched_tokens: int
    reason: str


@dataclass
class MemoryProfile:
    total_bytes: int  # device (or host) memory
    weight_bytes: int  # the loaded model
    peak_activation_bytes: int  # peak above the weights while running the profile batch
    num_profile_tokens: int  # tokens in that batch

    @property
    def bytes_per_token(self) -> float:
        return self.peak_activation_bytes / max(1, self.num_profile_tokens)


def choose_token_budget(
    profile: MemoryProfile, memory_utilization: float, max_model_len: int, max_budget: int
) -> ChosenBudget:
    """The largest budget that fits, with why. Raises when not even one max_model_len sequence fits."""
    usable = profile.total_bytes * memory_utilization - profile.weight_bytes
    gib = 2**30
    if usable <= 0:
        raise ValueError(
            f"the model's weights ({profile.weight_bytes / gib:.2f} GiB) do not fit in "
            f"gpu_memory_utilization={memory_utilization} of {profile.total_bytes / gib:.2f} GiB; "
            "raise --gpu-memory-utilization"
        )
    fitting = int(usable // max(profile.bytes_per_token, 1.0))
    if fitting < max_model_len:
        raise ValueError(
            f"only {fitting} tokens of activations fit in {usable / gib:.2f} GiB "
            f"({profile.bytes_per_token / 1024:.1f} KiB per token), "
            f"fewer than max_model_len ({max_model_len}); "
            "raise --gpu-memory-utilization or lower --max-model-len"
        )
    budget = min(fitting, max_budget)
    if budget >= BUDGET_ALIGNMENT:
        budget -= budget % BUDGET_ALIGNMENT
    budget = max(budget, max_model_len)
    limit = "memory" if fitting <= max_budget else f"the cap of {max_budget} tokens"
    reason = (
        f"{budget} tokens: {profile.bytes_per_token / 1024:.1f} KiB of activations per token (measured on "
        f"{profile.num_profile_tokens} tokens), {usable / gib:.2f} GiB usable = {memory_utilization:.0%} of "
        f"{profile.total_bytes / gib:.2f} GiB minus {profile.weight_bytes / gib:.2f} GiB of weights; "
        f"limited by {limit}"
    )
    return ChosenBudget(budget, reason)
