"""Reference solution to chapter 4's last exercise: the whole paged decode kernel and its split-K merge."""

from __future__ import annotations

from ... import runtime  # noqa: F401  (sets TRITON_INTERPRET before triton is imported)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def paged_decode_kernel(q_ptr,              # [num_seqs, num_heads, head_dim], one query token per sequence
                        k_cache_ptr,        # [num_blocks, block_size, num_kv_heads, head_dim], any strides but head_dim's
                        v_cache_ptr,        # same shape and strides as k_cache
                        block_tables_ptr,   # int32 [num_seqs, max_blocks]
                        seq_lens_ptr,       # int32 [num_seqs], tokens in the cache, the new one included
                        part_ptr,           # float32 [num_seqs, num_heads, num_splits, head_dim]
                        lse_ptr,            # float32 [num_seqs, num_heads, num_splits], base-2 log-sum-exp
                        qk_scale,           # softmax scale * log2(e)
                        num_splits,         # splits of each sequence's positions
                        stride_qs, stride_qh,                 # q's strides: sequence, head
                        stride_cb, stride_ct, stride_ch,      # the caches' strides: block, slot in block, KV head
                        stride_tb,                            # block_tables' row stride
                        stride_ps, stride_ph, stride_pk,      # part's strides: sequence, head, split
                        stride_ls, stride_lh,                 # lse's strides: sequence, head
                        GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                        HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr):
    """Program (sequence, KV head, split): the split's normalised partial output and base-2 log-sum-exp."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    # This split's positions: whole tiles, so only its last tile is ragged.
    seq_len = tl.load(seq_lens_ptr + seq)
    chunk = tl.cdiv(tl.cdiv(seq_len, num_splits), TILE_N) * TILE_N
    start = split * chunk
    end = tl.minimum(start + chunk, seq_len)
    # GQA: the GROUP query heads of this KV head are the rows of one tile.
    offs_g = tl.arange(0, GROUP_PAD)
    mask_g = offs_g < GROUP
    heads = kv_head * GROUP + offs_g
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    q_mask = mask_g[:, None] & mask_d[None, :]
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + offs_d[None, :], mask=q_mask, other=0.0)
    q = q.to(tl.float32)
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM_PAD], tl.float32)
    for tile_start in range(start, end, TILE_N):
        offs_n = tile_start + tl.arange(0, TILE_N)
        mask_n = offs_n < end
        block = tl.load(block_tables_ptr + seq * stride_tb + offs_n // BLOCK_SIZE, mask=mask_n, other=0)
        rows = block.to(tl.int64) * stride_cb + (offs_n % BLOCK_SIZE) * stride_ct + kv_head * stride_ch
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_cache_ptr + rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0).to(tl.float32)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
        qk = tl.where(mask_n[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    # An empty split (it starts past the sequence) has l = 0: output 0, lse -inf.
    safe_l = tl.where(l_i > 0, l_i, 1.0)
    part = part_ptr + seq * stride_ps + heads[:, None] * stride_ph + split * stride_pk + offs_d[None, :]
    tl.store(part, acc / safe_l[:, None], mask=q_mask)
    lse = tl.where(l_i > 0, m_i + tl.log2(safe_l), float("-inf"))
    tl.store(lse_ptr + seq * stride_ls + heads * stride_lh + split, lse, mask=mask_g)


@triton.jit
def merge_splits_kernel(part_ptr,     # float32 [num_seqs, num_heads, num_splits, head_dim]
                        lse_ptr,      # float32 [num_seqs, num_heads, num_splits]
                        out_ptr,      # [num_seqs, num_heads, head_dim]
                        num_splits,   # splits stage 1 wrote
                        stride_ps, stride_ph, stride_pk,   # part's strides: sequence, head, split
                        stride_ls, stride_lh,              # lse's strides: sequence, head
                        stride_os, stride_oh,              # out's strides: sequence, head
                        HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, SPLITS_PAD: tl.constexpr):
    """Program (sequence, query head): the splits' partial outputs weighted by their shares 2**lse."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, SPLITS_PAD)
    mask_s = offs_s < num_splits
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    lse = tl.load(lse_ptr + seq * stride_ls + head * stride_lh + offs_s, mask=mask_s, other=float("-inf"))
    part = tl.load(part_ptr + seq * stride_ps + head * stride_ph + offs_s[:, None] * stride_pk + offs_d[None, :],
                   mask=mask_s[:, None] & mask_d[None, :], other=0.0)
    weights = tl.exp2(lse - tl.max(lse, 0))   # split 0 always holds a token, so the max is finite
    out = tl.sum(weights[:, None] * part, 0) / tl.sum(weights, 0)
    tl.store(out_ptr + seq * stride_os + head * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty), mask=mask_d)
