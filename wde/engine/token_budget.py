"""What one batch may hold: a token budget and a sequence cap, charged the way the attention backend works."""

from __future__ import annotations


class TokenBudget:
    """Charges ``sum(len)`` for varlen backends, ``max(len) * num_seqs`` for backends that pad."""

    def __init__(self, max_num_batched_tokens: int, max_num_seqs: int, is_padded: bool) -> None:
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.is_padded = is_padded
        self.num_seqs = 0
        self.num_tokens = 0
        self.max_seq_len = 0

    @property
    def cost(self) -> int:
        return self.max_seq_len * self.num_seqs if self.is_padded else self.num_tokens

    def cost_with(self, num_tokens: int) -> int:
        if self.is_padded:
            return max(self.max_seq_len, num_tokens) * (self.num_seqs + 1)
        return self.num_tokens + num_tokens

    def can_add(self, num_tokens: int) -> bool:
        if self.num_seqs == 0:
            return True  # a request longer than the whole budget still runs, alone
        if self.num_seqs >= self.max_num_seqs:
            return False
        return self.cost_with(num_tokens) <= self.max_num_batched_tokens

    def add(self, num_tokens: int) -> None:
        self.num_seqs += 1
        self.num_tokens += num_tokens
        self.max_seq_len = max(self.max_seq_len, num_tokens)
