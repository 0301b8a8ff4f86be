"""One Triton kernel for every attention step: prefill, chunks, prefix hits and decode (chapter 5).

vLLM v1's "unified" Triton attention, written for this book: the step's new tokens are packed
end to end (``query_start_loc``); a program owns ``BLOCK_Q`` tokens of one sequence times the GQA
group, and walks the keys its last query may see through the block table, causally masked.
The split-K decode kernel stays for decode steps, where this kernel's tile would be mostly padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import runtime  # imported before triton: it sets TRITON_INTERPRET on a CPU

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .triton_decode import _TL_DTYPES, LOG2E, _next_pow2  # noqa: E402


@dataclass(frozen=True)
class UnifiedConfig:
    """Compile-time tile sizes of the unified kernel."""

    block_m: int  # rows of a query tile: BLOCK_Q tokens x GROUP heads, a power of two
    tile_n: int  # key positions per loop iteration
    head_dim_pad: int  # head_dim padded to a power of two (>= 16 on a GPU)
    num_warps: int = 4
    num_stages: int = 3
    dot_fp32: bool = False  # both dots in float32 (fp32 caches; bf16 under the interpreter)

    def block_q(self, group: int) -> int:
        """Query tokens per tile: as many whole GQA groups as fit in ``block_m`` rows."""
        return self.block_m // group


def unified_config(group: int, head_dim: int, dtype: torch.dtype, max_query_len: int = 1, *,
                   gpu: bool | None = None, block_m: int | None = None, tile_n: int | None = None,
                   num_warps: int = 4, num_stages: int = 3) -> UnifiedConfig:
    """Tile sizes for a GQA group, head_dim and dtype on a GPU (``gpu=True``) or the interpreter.

    ``max_query_len`` only matters in the interpreter, which runs programs one after another, so
    the tile grows to hold the longest query (fewer programs); on a GPU the tile is fixed so no
    host sync is needed. The GPU sizes are untuned first choices (no GPU was at hand when they
    were written): ``bench attention --mode prefill`` measures them.
    """
    gpu = runtime.BACKEND == "cuda" if gpu is None else gpu
    if gpu:
        head_dim_pad = max(16, _next_pow2(head_dim))
        fp32 = dtype == torch.float32
        # Sized so that scripts/compile_for_gpu.py finds no register spills on sm_90: fp32 dots run
        # without 16-bit tensor-core inputs and need smaller tiles; past head_dim 128 the tiles shrink too.
        if fp32:
            rows, keys = (32, 32) if head_dim_pad <= 128 else (16, 16)
        else:
            rows, keys = 64, (64 if head_dim_pad <= 128 else 32)
        return UnifiedConfig(block_m or max(rows, _next_pow2(group)), tile_n or keys, head_dim_pad, num_warps,
                             num_stages, dot_fp32=fp32)
    rows = block_m or min(max(128, _next_pow2(group)), _next_pow2(group * max(1, max_query_len)))
    return UnifiedConfig(rows, tile_n or 32, _next_pow2(head_dim), num_warps, num_stages,
                         dot_fp32=dtype in (torch.float32, torch.bfloat16))


@triton.jit
def _find_sequence(query_start_loc_ptr, tile, num_seqs, BLOCK_Q: tl.constexpr):
    """The sequence whose query tiles include ``tile``: the last s with qsl[s] // BLOCK_Q + s <= tile."""
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        first_tile = tl.load(query_start_loc_ptr + mid) // BLOCK_Q + mid
        if first_tile <= tile:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@triton.jit
def unified_attention_kernel(
    q_ptr,                 # [num_tokens, num_heads, head_dim], the step's new tokens packed end to end
    k_cache_ptr,           # [num_blocks, block_size, num_kv_heads, head_dim], any strides but head_dim's
    v_cache_ptr,           # same shape and strides as k_cache
    block_tables_ptr,      # int32 [num_seqs, max_blocks]
    seq_lens_ptr,          # int32 [num_seqs], contiguous: tokens in the cache, this step's included
    query_start_loc_ptr,   # int32 [num_seqs + 1], contiguous: sequence s's tokens are q[qsl[s]:qsl[s + 1]]
    out_ptr,               # [num_tokens, num_heads, head_dim]
    qk_scale,              # softmax scale * log2(e)
    num_seqs,              # sequences in the step
    stride_qt, stride_qh,                          # q's strides: token, head
    stride_cblock, stride_ctoken, stride_chead,    # the caches' strides: block, slot in block, KV head
    stride_tb,                                     # block_tables' row stride
    stride_ot, stride_oh,                          # out's strides: token, head
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr,
    DOT_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """One program: query tile ``program_id(0)`` (numbered across the batch), KV head ``program_id(1)``."""
    tile = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = _find_sequence(query_start_loc_ptr, tile, num_seqs, BLOCK_Q)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    local_tile = tile - (q_start // BLOCK_Q + seq)
    if local_tile * BLOCK_Q >= q_len:  # a spare tile, or a sequence without queries
        return

    seq_len = tl.load(seq_lens_ptr + seq)
    context_len = seq_len - q_len  # keys cached before this step's tokens

    # Row r of the tile: query token local_tile * BLOCK_Q + r // GROUP, query head kv_head * GROUP + r % GROUP.
    offs_m = tl.arange(0, BLOCK_M)
    q_idx = local_tile * BLOCK_Q + offs_m // GROUP  # index among this sequence's new tokens
    heads = kv_head * GROUP + offs_m % GROUP
    mask_m = (offs_m < BLOCK_Q * GROUP) & (q_idx < q_len)
    q_pos = context_len + q_idx  # the query's position in its sequence
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    q_mask = mask_m[:, None] & mask_d[None, :]
    q_rows = (q_start + q_idx).to(tl.int64) * stride_qt + heads * stride_qh
    q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :], mask=q_mask, other=0.0).to(DOT_DTYPE)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)
    # The tile's last query sees keys up to its own position: nothing past kv_end is read.
    kv_end = tl.minimum(context_len + (local_tile + 1) * BLOCK_Q, seq_len)
    table_row = block_tables_ptr + seq * stride_tb
    for tile_start in tl.range(0, kv_end, TILE_N):
        offs_n = tile_start + tl.arange(0, TILE_N)
        mask_n = offs_n < kv_end
        page = tl.load(table_row + offs_n // BLOCK_SIZE, mask=mask_n, other=0).to(tl.int64)   # block-table lookup
        rows = page * stride_cblock + (offs_n % BLOCK_SIZE) * stride_ctoken + kv_head * stride_chead
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_cache_ptr + rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0).to(DOT_DTYPE)
        v = tl.load(v_cache_ptr + rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0).to(DOT_DTYPE)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # [BLOCK_M, TILE_N], base 2
        visible = (offs_n[None, :] <= q_pos[:, None]) & mask_n[None, :]
        qk = tl.where(visible, qk, float("-inf"))
        # Online softmax. A row that has seen no key yet (padding) keeps max -inf; computing
        # against 0 instead gives p = 0 and alpha = 0 rather than exp2(-inf - -inf) = NaN.
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(qk - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v, input_precision=DOT_PRECISION)
        m_i = m_new

    safe_l = tl.where(l_i > 0, l_i, 1.0)
    out = acc / safe_l[:, None]
    o_rows = (q_start + q_idx).to(tl.int64) * stride_ot + heads * stride_oh
    tl.store(out_ptr + o_rows[:, None] + offs_d[None, :], out.to(out_ptr.dtype.element_ty), mask=q_mask)


def num_query_tiles(num_tokens: int, num_seqs: int, block_q: int) -> int:
    """Programs along the grid's first axis: enough for any split of ``num_tokens`` into ``num_seqs``.

    Sequence ``s``'s tiles start at ``qsl[s] // BLOCK_Q + s`` (a spare tile per sequence pays for
    ragged starts), so the grid needs no host sync; spare programs return at once.
    """
    return num_tokens // block_q + num_seqs


def unified_attention_triton(
    q: torch.Tensor,                 # [num_tokens, num_heads, head_dim], packed sequence by sequence
    k_cache: torch.Tensor,           # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,           # same shape as k_cache
    block_tables: torch.Tensor,      # int32 [num_seqs, max_blocks]
    seq_lens: torch.Tensor,          # int32 [num_seqs], this step's tokens included
    query_start_loc: torch.Tensor,   # int32 [num_seqs + 1]
    scale: float,
    out: torch.Tensor,               # [num_tokens, num_heads, head_dim], q's dtype
    config: UnifiedConfig | None = None,
    max_query_len: int | None = None,
) -> torch.Tensor:
    """Launch the unified kernel once for the whole step; inputs must be validated already."""
    num_tokens, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    num_seqs = seq_lens.shape[0]
    group = num_heads // num_kv_heads
    if num_tokens == 0:
        return out
    if config is None:
        if max_query_len is None and q.device.type == "cpu":  # free on a CPU; a GPU keeps its fixed tile
            max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max())
        config = unified_config(group, head_dim, q.dtype, max_query_len or 1)
    block_q = config.block_q(group)
    if block_q < 1:
        raise ValueError(f"block_m={config.block_m} rows cannot hold one GQA group of {group} query heads")
    q = q if q.stride(-1) == 1 else q.contiguous()
    grid = (num_query_tiles(num_tokens, num_seqs, block_q), num_kv_heads)
    unified_attention_kernel[grid](
        q, k_cache, v_cache, block_tables, seq_lens.contiguous(), query_start_loc.contiguous(), out,
        scale * LOG2E, num_seqs,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0),
        out.stride(0), out.stride(1),
        GROUP=group, BLOCK_M=config.block_m, BLOCK_Q=block_q,
        HEAD_DIM=head_dim, HEAD_DIM_PAD=config.head_dim_pad,
        BLOCK_SIZE=block_size, TILE_N=config.tile_n,
        DOT_DTYPE=tl.float32 if config.dot_fp32 else _TL_DTYPES[q.dtype],
        DOT_PRECISION="ieee" if config.dot_fp32 else "tf32",
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out
