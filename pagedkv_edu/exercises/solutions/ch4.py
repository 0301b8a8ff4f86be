"""Reference solutions to chapter 4's first steps: the online-softmax update in PyTorch, and the warm-up
Triton puzzles. Read them after trying."""

from __future__ import annotations

import torch


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
