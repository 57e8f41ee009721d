"""TokenBudget: sum of lengths for varlen backends, max length x sequences for padded ones, a sequence cap,
and an over-long first request still admitted alone."""

from __future__ import annotations

from wde.engine.token_budget import TokenBudget


def test_varlen_charges_the_sum_and_padded_the_rectangle() -> None:
    varlen, padded = TokenBudget(100, 8, is_padded=False), TokenBudget(100, 8, is_padded=True)
    for budget in (varlen, padded):
        for num_tokens in (10, 30, 20):
            assert budget.can_add(num_tokens)
            budget.add(num_tokens)
    assert varlen.cost == 60 and padded.cost == 90
    assert varlen.cost_with(40) == 100 and varlen.can_add(40)
    assert padded.cost_with(5) == 120 and not padded.can_add(5)


def test_the_sequence_cap_holds_even_with_tokens_left() -> None:
    budget = TokenBudget(1000, 2, is_padded=False)
    budget.add(1)
    budget.add(1)
    assert budget.num_seqs == 2
    assert not budget.can_add(1)


def test_a_request_longer_than_the_budget_runs_alone() -> None:
    budget = TokenBudget(16, 4, is_padded=False)
    assert budget.can_add(500)
    budget.add(500)
    assert not budget.can_add(1)
    assert budget.max_seq_len == 500
