"""Chapter 4's five pieces assembled into one paged-attention kernel for prefill and decode alike.

:func:`assemble_paged_attention` takes the reader's ``@triton.jit`` pieces (a missing one is the
shipped solution) and returns a callable with CONTRACT A's signature, so
``paged_attention(..., backend=attend)`` and chapter 5's decoder run on the reader's kernel.
Chapter 4 (notebooks/04_triton_decode_kernel.ipynb) teaches the grid and split-K.
"""

from __future__ import annotations


import torch

from .. import runtime
from ..attention import AttentionFn
from ..attention.triton_decode import LOG2E, choose_num_splits, launch_config
from ..attention.validate import check_paged_inputs
from .solutions import ch4_triton as solution

import triton  # noqa: E402  (runtime chose the interpreter or a GPU first)
import triton.language as tl  # noqa: E402


DEFAULT_TILE_N = 64
"""Key positions per loop iteration: the interpreter runs fewer, larger tiles faster."""

BLOCK_Q = 16
"""Query tokens per program when a sequence brings more than one (a prefill or a chunk)."""


@triton.jit
def assembled_split_kernel(
    q_ptr,                  # [num_tokens, num_heads, head_dim], the new tokens packed sequence by sequence
    k_cache_ptr,            # [num_blocks, block_size, num_kv_heads, head_dim], any strides but head_dim's
    v_cache_ptr,            # same shape and strides as k_cache
    block_tables_ptr,       # int32 [num_seqs, max_blocks]
    seq_lens_ptr,           # int32 [num_seqs], tokens in the cache, the new ones included
    query_start_loc_ptr,    # int32 [num_seqs + 1], sequence s's queries are q[start[s]:start[s + 1]]
    block_seq_ptr,          # int32 [num_query_blocks], the sequence of each query block
    block_q0_ptr,           # int32 [num_query_blocks], each block's first token (an index into q)
    part_ptr,               # float32 [num_tokens, num_heads, num_splits, head_dim]; the output itself without split-K
    lse_ptr,                # float32 [num_tokens, num_heads, num_splits], base-2 log-sum-exp
    qk_scale,               # softmax scale * log2(e)
    num_splits,             # splits of each sequence's keys
    stride_qt, stride_qh,   # q's strides: token, head
    stride_cb, stride_ct, stride_ch,   # the caches' strides: block, slot in block, KV head
    stride_tb,              # block_tables' row stride
    stride_pt, stride_ph, stride_ps,   # part's strides: token, head, split
    stride_lt, stride_lh,   # lse's strides: token, head
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, BLOCK_Q: tl.constexpr,
    # The reader's pieces: a @triton.jit function passed as tl.constexpr is compiled into the program.
    TILE_SLOTS: tl.constexpr, LOAD_TILE: tl.constexpr, UPDATE: tl.constexpr, WRITE_LSE: tl.constexpr,
):
    """Stage 1, program (query block, KV head, split): normalised outputs (and lse) of its rows.

    A query block is up to ``BLOCK_Q`` new tokens of one sequence; its rows are (token, head of
    this KV head's group) pairs, so one K/V tile serves them all, under a causal mask.
    """
    qblock = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq = tl.load(block_seq_ptr + qblock)
    q0 = tl.load(block_q0_ptr + qblock)  # the block's first query token (an index into q)
    q_end = tl.load(query_start_loc_ptr + seq + 1)
    seq_len = tl.load(seq_lens_ptr + seq)
    first_pos = seq_len - q_end + q0  # the position of token q0 in its sequence

    # Rows: (query token, query head) pairs; row r is token q0 + r // GROUP_PAD, head r % GROUP_PAD.
    offs_r = tl.arange(0, BLOCK_Q * GROUP_PAD)
    qi = offs_r // GROUP_PAD
    g = offs_r % GROUP_PAD
    tokens = q0 + qi
    row_mask = (tokens < q_end) & (g < GROUP)
    row_pos = first_pos + qi  # each row sees keys 0 .. row_pos
    heads = kv_head * GROUP + g
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    q_mask = row_mask[:, None] & mask_d[None, :]
    q = tl.load(q_ptr + tokens.to(tl.int64)[:, None] * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
                mask=q_mask, other=0.0).to(tl.float32)

    ctx = tl.minimum(first_pos + BLOCK_Q, seq_len)  # keys the block's last row sees
    chunk = tl.cdiv(tl.cdiv(ctx, num_splits), TILE_N) * TILE_N
    start = split * chunk
    end = tl.minimum(start + chunk, ctx)
    m_i = tl.full([BLOCK_Q * GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_Q * GROUP_PAD], tl.float32)
    acc = tl.zeros([BLOCK_Q * GROUP_PAD, HEAD_DIM_PAD], tl.float32)
    table_row = block_tables_ptr + seq.to(tl.int64) * stride_tb
    for tile_start in tl.range(start, end, TILE_N):
        offs_n = tile_start + tl.arange(0, TILE_N)
        mask_n = offs_n < end
        slots = TILE_SLOTS(table_row, offs_n, mask_n, BLOCK_SIZE)
        k = LOAD_TILE(k_cache_ptr, slots, mask_n, kv_head, offs_d, mask_d,
                      stride_cb, stride_ct, stride_ch, BLOCK_SIZE).to(tl.float32)
        v = LOAD_TILE(v_cache_ptr, slots, mask_n, kv_head, offs_d, mask_d,
                      stride_cb, stride_ct, stride_ch, BLOCK_SIZE).to(tl.float32)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale  # [rows, TILE_N], base-2 logits
        visible = mask_n[None, :] & (offs_n[None, :] <= row_pos[:, None])
        qk = tl.where(visible, qk, float("-inf"))
        m_i, l_i, acc = UPDATE(m_i, l_i, acc, qk, v)

    safe_l = tl.where(l_i > 0, l_i, 1.0)  # an empty split has l = 0: output 0, lse -inf
    part = acc / safe_l[:, None]
    base = tokens.to(tl.int64) * stride_pt + heads * stride_ph + split * stride_ps
    tl.store(part_ptr + base[:, None] + offs_d[None, :], part.to(part_ptr.dtype.element_ty), mask=q_mask)
    if WRITE_LSE:
        lse = tl.where(l_i > 0, m_i + tl.log2(safe_l), float("-inf"))
        tl.store(lse_ptr + tokens.to(tl.int64) * stride_lt + heads * stride_lh + split, lse, mask=row_mask)


@triton.jit
def assembled_merge_kernel(part_ptr,     # float32 [num_tokens, num_heads, num_splits, head_dim]
                           lse_ptr,      # float32 [num_tokens, num_heads, num_splits]
                           out_ptr,      # [num_tokens, num_heads, head_dim]
                           num_splits,   # splits written by stage 1
                           stride_pt, stride_ph, stride_ps,   # part's strides: token, head, split
                           stride_lt, stride_lh,              # lse's strides: token, head
                           stride_ot, stride_oh,              # out's strides: token, head
                           HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, SPLITS_PAD: tl.constexpr,
                           MERGE: tl.constexpr):   # the reader's merge piece
    """Stage 2, program (query token, query head): merge the splits with the merge piece."""
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    out = MERGE(part_ptr + token * stride_pt + head * stride_ph, lse_ptr + token * stride_lt + head * stride_lh,
                num_splits, stride_ps, offs_d, mask_d, SPLITS_PAD)
    tl.store(out_ptr + token * stride_ot + head * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty), mask=mask_d)


def assemble_paged_attention(
    tile_slots: object = None,
    load_tile: object = None,
    softmax_tile_update: object = None,
    merge_splits: object = None,
    *,
    num_splits: int | None = None,
    tile_n: int = DEFAULT_TILE_N,
    name: str = "reader_paged_attention",
) -> AttentionFn:
    """A paged-attention callable built from chapter 4's pieces (``None`` = the shipped solution).

    The result has CONTRACT A's positional signature ``(q, k_cache, v_cache, block_tables,
    seq_lens, query_start_loc, scale) -> Tensor`` and the ``__name__`` ``name``, which
    ``kernel_name`` reports as ``"custom:<name>"``. ``num_splits=None`` splits only on a GPU
    whose SMs the (token, KV head) programs cannot fill; an integer forces it.
    """
    pieces = dict(
        TILE_SLOTS=tile_slots or solution.tile_slots,
        LOAD_TILE=load_tile or solution.load_tile,
        UPDATE=softmax_tile_update or solution.softmax_tile_update,
    )
    merge = merge_splits or solution.merge_splits
    if num_splits is not None and not (isinstance(num_splits, int) and num_splits >= 1):
        raise ValueError(f"num_splits must be None or a positive integer, got {num_splits!r}")
    if not (isinstance(tile_n, int) and tile_n >= 1 and tile_n & (tile_n - 1) == 0):
        raise ValueError(f"tile_n must be a power of two (tl.arange needs one), got {tile_n!r}")

    def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
               seq_lens: torch.Tensor, query_start_loc: torch.Tensor, scale: float | None = None) -> torch.Tensor:
        q_lens, _ = check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc)
        num_tokens, num_heads, head_dim = q.shape
        _, block_size, num_kv_heads, _ = k_cache.shape
        group = num_heads // num_kv_heads
        scale = head_dim ** -0.5 if scale is None else float(scale)
        out = torch.empty_like(q)
        if num_tokens == 0:
            return out
        # The query blocks: up to block_q consecutive new tokens of one sequence each.
        starts = query_start_loc.tolist()
        block_q = 1 if max(q_lens) == 1 else BLOCK_Q
        block_seq, block_q0 = [], []
        for s, (first, n) in enumerate(zip(starts, q_lens)):
            for j in range(0, n, block_q):
                block_seq.append(s)
                block_q0.append(first + j)
        if block_q > 1:
            splits = 1  # with several query tokens, a split after a row's position leaves it no key at all
        else:
            splits = num_splits or choose_num_splits(num_tokens, num_kv_heads, block_tables.shape[1] * block_size,
                                                     q.device)
        cfg = launch_config(group, head_dim, q.dtype)
        q = q if q.stride(-1) == 1 else q.contiguous()
        common = dict(GROUP=group, GROUP_PAD=cfg.group_pad, HEAD_DIM=head_dim, HEAD_DIM_PAD=cfg.head_dim_pad,
                      BLOCK_SIZE=block_size, TILE_N=max(tile_n, 16) if runtime.BACKEND == "cuda" else tile_n,
                      BLOCK_Q=block_q, **pieces)
        grid = (len(block_seq), num_kv_heads, splits)
        tables = (seq_lens, query_start_loc, torch.tensor(block_seq, dtype=torch.int32, device=q.device),
                  torch.tensor(block_q0, dtype=torch.int32, device=q.device))
        cache_strides = (k_cache.stride(0), k_cache.stride(1), k_cache.stride(2))
        if splits == 1:   # stage 1 writes the output itself: no merge launch (the interpreter runs them serially)
            assembled_split_kernel[grid](
                q, k_cache, v_cache, block_tables, *tables, out, out, scale * LOG2E, 1,
                q.stride(0), q.stride(1), *cache_strides, block_tables.stride(0),
                out.stride(0), out.stride(1), 0, 0, 0, WRITE_LSE=False, **common,
            )
            return out
        part = torch.empty(num_tokens, num_heads, splits, head_dim, dtype=torch.float32, device=q.device)
        lse = torch.empty(num_tokens, num_heads, splits, dtype=torch.float32, device=q.device)
        assembled_split_kernel[grid](
            q, k_cache, v_cache, block_tables, *tables, part, lse, scale * LOG2E, splits,
            q.stride(0), q.stride(1), *cache_strides, block_tables.stride(0),
            part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1), WRITE_LSE=True, **common,
        )
        assembled_merge_kernel[(num_tokens, num_heads)](
            part, lse, out, splits, part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
            out.stride(0), out.stride(1),
            HEAD_DIM=head_dim, HEAD_DIM_PAD=triton.next_power_of_2(head_dim),
            SPLITS_PAD=triton.next_power_of_2(splits), MERGE=merge,
        )
        return out

    attend.__name__ = attend.__qualname__ = name
    attend.__doc__ = (f"{name}: paged attention assembled from chapter 4's pieces "
                      f"(tile_slots, load_tile, softmax_tile_update, merge_splits).")
    return attend


solution_paged_attention = assemble_paged_attention(name="solution_paged_attention")
"""The assembled kernel with every piece from the shipped solutions."""
