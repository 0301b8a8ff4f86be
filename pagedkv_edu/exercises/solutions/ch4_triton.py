"""Reference solutions to chapter 4's Triton exercises: five pieces of a paged decode kernel.

Read them after trying. Each piece is a ``@triton.jit`` function; the graders in
:mod:`pagedkv_edu.exercises.ch4_triton` launch it in the Triton interpreter, and
:mod:`pagedkv_edu.exercises.ch4_assembly` plugs it (or the reader's version) into a working
paged-attention kernel. The conventions every piece shares:

* the cache is NHD, ``[num_blocks, block_size, num_kv_heads, head_dim]``, with any strides
  except the last (head_dim is contiguous);
* a *slot* is ``block * block_size + offset``; the slot mapping is
  ``slot = table[pos // B] * B + pos % B`` and -1 marks a token that must not be written;
* scores are base-2 logits (the kernel folds ``log2(e)`` into the scale), so every
  exponential is an ``exp2``.
"""

from __future__ import annotations

from ... import runtime  # noqa: F401  (sets TRITON_INTERPRET before triton is imported)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def store_kv_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
                    stride_kt, stride_kh, stride_vt, stride_vh,
                    stride_cb, stride_ct, stride_ch,
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
def tile_slots(table_row_ptr, offs_n, mask_n, BLOCK_SIZE: tl.constexpr):
    """Piece 2: the cache slot of every position of a tile, through one sequence's block table.

    ``offs_n`` are token positions, ``mask_n`` says which belong to the sequence. A masked
    position must not load its table entry (it may be -1, or past the table); its slot is
    never used, so any value will do.
    """
    block = tl.load(table_row_ptr + offs_n // BLOCK_SIZE, mask=mask_n, other=0).to(tl.int64)
    return block * BLOCK_SIZE + offs_n % BLOCK_SIZE


@triton.jit
def load_tile(cache_ptr, slots, mask_n, kv_head, offs_d, mask_d,
              stride_block, stride_token, stride_head, BLOCK_SIZE: tl.constexpr):
    """Piece 3: the ``[TILE_N, HEAD_DIM_PAD]`` tile of one KV head's rows at ``slots``.

    A slot is a (block, offset) pair, and each has its own stride: blocks need not sit
    ``BLOCK_SIZE`` rows apart. Masked rows (positions past the sequence) and padded columns
    read as 0: never as whatever the memory holds, because an unwritten slot may be NaN,
    and 0 x NaN is NaN in the weighted sum of V.
    """
    rows = (slots // BLOCK_SIZE) * stride_block + (slots % BLOCK_SIZE) * stride_token + kv_head * stride_head
    return tl.load(cache_ptr + rows[:, None] + offs_d[None, :], mask=mask_n[:, None] & mask_d[None, :], other=0.0)


@triton.jit
def softmax_tile_update(m_i, l_i, acc, qk, v):
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
def merge_splits(part_ptr, lse_ptr, num_splits, stride_split, offs_d, mask_d, SPLITS_PAD: tl.constexpr):
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
