"""Reference solutions to chapter 4's five Triton pieces of a paged decode kernel (read them after trying).

Shared conventions: the cache is NHD ``[num_blocks, block_size, num_kv_heads, head_dim]`` with a
contiguous head_dim; ``slot = table[pos // B] * B + pos % B`` and -1 marks a token not to write;
scores are base-2 logits (``log2(e)`` is folded into the scale), so every exponential is ``exp2``.
"""

from __future__ import annotations

from ... import runtime  # noqa: F401  (sets TRITON_INTERPRET before triton is imported)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def store_kv_kernel(k_ptr,             # [num_tokens, num_kv_heads, head_dim], the new tokens' keys
                    v_ptr,             # [num_tokens, num_kv_heads, head_dim]
                    k_cache_ptr,       # [num_blocks, block_size, num_kv_heads, head_dim], any strides but head_dim's
                    v_cache_ptr,       # same shape and strides as k_cache
                    slot_mapping_ptr,  # int [num_tokens], block * block_size + offset, or -1: do not write
                    stride_kt, stride_kh, stride_vt, stride_vh,   # k's and v's strides: token, head
                    stride_cb, stride_ct, stride_ch,              # the caches' strides: block, slot, head
                    NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                    HEADS_PAD: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """Piece 1, one program per new token: copy its K and V rows to cache slot ``slot_mapping[token]``.

    The slot splits into a block and an offset with ``//`` and ``%`` (any block size, not
    only powers of two); slot -1 is a padding token, whose rows are not written at all.
    """
    token = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot >= 0:  # a scalar test; the interpreter refuses "block_mask & (slot >= 0)"
        block = slot // BLOCK_SIZE
        offset = slot % BLOCK_SIZE
        offs_h = tl.arange(0, HEADS_PAD)
        offs_d = tl.arange(0, HEAD_DIM_PAD)
        mask = (offs_h < NUM_KV_HEADS)[:, None] & (offs_d < HEAD_DIM)[None, :]
        dst = block * stride_cb + offset * stride_ct + offs_h[:, None] * stride_ch + offs_d[None, :]
        k = tl.load(k_ptr + token * stride_kt + offs_h[:, None] * stride_kh + offs_d[None, :], mask=mask)
        v = tl.load(v_ptr + token * stride_vt + offs_h[:, None] * stride_vh + offs_d[None, :], mask=mask)
        tl.store(k_cache_ptr + dst, k, mask=mask)
        tl.store(v_cache_ptr + dst, v, mask=mask)

@triton.jit
def tile_slots(table_row_ptr,   # int32 [max_blocks], this sequence's block-table row
               offs_n,          # [TILE_N] token positions
               mask_n,          # [TILE_N] bool, positions inside the sequence
               BLOCK_SIZE: tl.constexpr):
    """Piece 2: the cache slot of every position of a tile, through one sequence's block table.

    ``offs_n`` are token positions, ``mask_n`` says which belong to the sequence. A masked
    position must not load its table entry (it may be -1, or past the table); its slot is
    never used, so any value will do.
    """
    block = tl.load(table_row_ptr + offs_n // BLOCK_SIZE, mask=mask_n, other=0).to(tl.int64)
    return block * BLOCK_SIZE + offs_n % BLOCK_SIZE


@triton.jit
def load_tile(cache_ptr,      # [num_blocks, block_size, num_kv_heads, head_dim], any strides but head_dim's
              slots,          # int64 [TILE_N], from tile_slots
              mask_n,         # [TILE_N] bool, rows inside the sequence
              kv_head,        # which KV head's rows
              offs_d,         # [HEAD_DIM_PAD] column indices
              mask_d,         # [HEAD_DIM_PAD] bool, columns < head_dim
              stride_block, stride_token, stride_head,   # the cache's strides: block, slot in block, head
              BLOCK_SIZE: tl.constexpr):
    """Piece 3: the ``[TILE_N, HEAD_DIM_PAD]`` tile of one KV head's rows at ``slots``.

    A slot is a (block, offset) pair, and each has its own stride: blocks need not sit
    ``BLOCK_SIZE`` rows apart. Masked rows (positions past the sequence) and padded columns
    read as 0: never as whatever the memory holds, because an unwritten slot may be NaN,
    and 0 x NaN is NaN in the weighted sum of V.
    """
    rows = (slots // BLOCK_SIZE) * stride_block + (slots % BLOCK_SIZE) * stride_token + kv_head * stride_head
    return tl.load(cache_ptr + rows[:, None] + offs_d[None, :], mask=mask_n[:, None] & mask_d[None, :], other=0.0)


@triton.jit
def softmax_tile_update(m_i,   # float32 [G], running max
                        l_i,   # float32 [G], running sum of exp2(score - m_i)
                        acc,   # float32 [G, D], running sum of exp2(score - m_i) * v
                        qk,    # float32 [G, T], this tile's base-2 scores (-inf where padded)
                        v):    # float32 [T, D], this tile's values
    """Piece 4: fold a tile of base-2 scores ``qk`` [G, T] and values ``v`` [T, D] into the state.

    ``m_i`` [G] is the running max, ``l_i`` [G] the running sum of exp2(score - m_i) and
    ``acc`` [G, D] the running sum of exp2(score - m_i) * v. A larger max rescales what was
    accumulated against the old one by alpha = exp2(m_old - m_new). Padded scores are -inf
    and contribute exp2(-inf) = 0.
    """
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(qk - m_new[:, None])
    l_new = l_i * alpha + tl.sum(p, 1)
    acc_new = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
    return m_new, l_new, acc_new


@triton.jit
def merge_splits(part_ptr,       # float32 [num_splits, head_dim] at stride stride_split, one (token, head)'s parts
                 lse_ptr,        # float32 [num_splits], contiguous, base-2 log-sum-exp (-inf: empty split)
                 num_splits,     # splits that exist (<= SPLITS_PAD)
                 stride_split,   # part's split stride
                 offs_d,         # [HEAD_DIM_PAD] column indices
                 mask_d,         # [HEAD_DIM_PAD] bool, columns < head_dim
                 SPLITS_PAD: tl.constexpr):
    """Piece 5, the split-K merge for one (token, query head): the ``[HEAD_DIM_PAD]`` output.

    Split ``s`` wrote its normalised partial output at ``part_ptr + s * stride_split`` and the
    base-2 log-sum-exp of its scores at ``lse_ptr + s`` (-inf for a split that held no
    tokens). Its share of the whole softmax is 2**(lse[s] - max) / sum(...), so the output
    is the share-weighted mean of the partial outputs. Only the first ``num_splits`` of the
    ``SPLITS_PAD`` rows exist.
    """
    offs_s = tl.arange(0, SPLITS_PAD)
    mask_s = offs_s < num_splits
    lse = tl.load(lse_ptr + offs_s, mask=mask_s, other=float("-inf"))
    part = tl.load(part_ptr + offs_s[:, None] * stride_split + offs_d[None, :],
                   mask=mask_s[:, None] & mask_d[None, :], other=0.0)
    weights = tl.exp2(lse - tl.max(lse, 0))
    return tl.sum(weights[:, None] * part, 0) / tl.sum(weights, 0)
