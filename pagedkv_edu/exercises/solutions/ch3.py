"""Reference solution to chapter 3: gathering one sequence's K/V out of the paged cache."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def gather_kv(cache: torch.Tensor, block_table: Sequence[int], seq_len: int) -> torch.Tensor:
    """Sequence's contiguous ``[seq_len, num_kv_heads, head_dim]`` K (or V) from a paged cache.

    View the cache as one row per slot, compute every position's slot with the slot mapping
    ``table[pos // B] * B + pos % B``, and index. Only the first ``ceil(seq_len / B)`` table
    entries are used; the tail of the last block is not part of the sequence.
    """
    num_blocks, block_size, num_kv_heads, head_dim = cache.shape
    slots = [block_table[pos // block_size] * block_size + pos % block_size for pos in range(seq_len)]
    return cache.reshape(num_blocks * block_size, num_kv_heads, head_dim)[slots]
