"""Reference solutions to chapters 3 and 4: gathering one sequence's K/V, and the online-softmax step."""

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


def online_softmax_update(
    m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor, scores: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fold one tile of ``scores`` ([G, T]) and values ``v`` ([T, D]) into the running state.

    The state after any number of tiles is: ``m`` [G] the largest score so far, ``l`` [G] the
    sum of ``exp(score - m)`` and ``acc`` [G, D] the sum of ``exp(score - m) * v``. When the
    max grows, everything accumulated against the old max is scaled by ``exp(m_old - m_new)``.
    Dividing ``acc / l`` at the end gives softmax(scores) @ v over all tiles.
    """
    m_new = torch.maximum(m, scores.max(dim=1).values)
    alpha = torch.exp(m - m_new)
    p = torch.exp(scores - m_new[:, None])
    return m_new, l * alpha + p.sum(dim=1), acc * alpha[:, None] + p @ v
