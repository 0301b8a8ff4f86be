"""Reference solutions to chapter 4's first steps: the online-softmax update and the Triton warm-ups."""

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


# --- the warm-up Triton puzzles ------------------------------------------------------------------------

from ... import runtime  # noqa: E402,F401  (sets TRITON_INTERPRET before triton is imported)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def pad_copy(x_ptr,     # [n]
             out_ptr,   # [programs * BLOCK]
             n,         # elements of x
             BLOCK: tl.constexpr):
    """Puzzle 1: program pid copies x[pid*BLOCK : pid*BLOCK + BLOCK] to out, with 0 past n."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0))


@triton.jit
def gather_rows(src_ptr,   # [num_rows, D], contiguous
                idx_ptr,   # int [n], rows of src to take
                out_ptr,   # [n, D], contiguous
                n,         # rows to gather
                D: tl.constexpr, BLOCK_N: tl.constexpr):
    """Puzzle 2: out[i, :] = src[idx[i], :] for the BLOCK_N rows i of this program that are < n."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = rows < n
    index = tl.load(idx_ptr + rows, mask=mask, other=0)
    cols = tl.arange(0, D)
    values = tl.load(src_ptr + index[:, None] * D + cols[None, :], mask=mask[:, None], other=0.0)
    tl.store(out_ptr + rows[:, None] * D + cols[None, :], values, mask=mask[:, None])


@triton.jit
def row_stats(x_ptr,         # [rows, >= max(lengths)]
              lengths_ptr,   # int [rows], valid values per row
              max_ptr,       # float [rows]
              sum_ptr,       # float [rows], sum of exp(x - max)
              stride_row,    # x's row stride
              BLOCK: tl.constexpr):
    """Puzzle 3: row r's max over its first lengths[r] values and the sum of exp(x - max)."""
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r * stride_row + offs, mask=offs < tl.load(lengths_ptr + r), other=float("-inf"))
    m = tl.max(x, 0)
    tl.store(max_ptr + r, m)
    tl.store(sum_ptr + r, tl.sum(tl.exp(x - m), 0))


@triton.jit
def scores(q_ptr,     # [G, D], contiguous
           k_ptr,     # [n, D], contiguous
           out_ptr,   # [G, BLOCK_N], contiguous
           n,         # keys (<= BLOCK_N)
           scale,     # softmax scale
           G: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr):
    """Puzzle 4: out[g, j] = scale * q[g]·k[j] for keys j < n and -inf for the padding keys, with tl.dot."""
    offs_g = tl.arange(0, G)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_g[:, None] * D + offs_d[None, :])
    k = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :], mask=(offs_n < n)[:, None], other=0.0)
    s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
    tl.store(out_ptr + offs_g[:, None] * BLOCK_N + offs_n[None, :], tl.where((offs_n < n)[None, :], s, float("-inf")))
