"""A paged-attention decode kernel in Triton (chapter 4 teaches it).

One program per (sequence, KV head, split): the block table per token, GQA heads packed into one
tile, an online softmax, and split-K with a second kernel that merges by log-sum-exp. Decode is
memory-bound (about G flops per K/V byte), so the goal is streaming the cache at copy speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import runtime  # imported before triton: it sets TRITON_INTERPRET on a CPU

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

LOG2E = 1.4426950408889634
"""exp(x) = exp2(x * log2(e)): the kernel folds log2(e) into the softmax scale and uses exp2."""

_TL_DTYPES = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}

MAX_SPLITS = 64
"""Most splits per sequence; stage 2 merges them in one [splits, head_dim] tile."""

MIN_TOKENS_PER_SPLIT = 512
"""Automatic split-K never makes a split shorter than this: shorter ones cost more to merge than they save."""


@dataclass(frozen=True)
class DecodeConfig:
    """Compile-time tile sizes and launch parameters of the decode kernel."""

    tile_n: int  # token positions per loop iteration
    group_pad: int  # GQA group padded to a power of two (>= 16 on a GPU, for tl.dot)
    head_dim_pad: int  # head_dim padded to a power of two (>= 16 on a GPU)
    num_warps: int = 4
    num_stages: int = 3  # software pipelining: the next tiles' table entries and K/V are loaded ahead
    dot_fp32: bool = False  # both dots in float32: fp32 caches, and bf16 in the interpreter, whose tl.dot
    #                         multiplies bf16's raw bits (chapter 5 measures it)


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def launch_config(group: int, head_dim: int, dtype: torch.dtype, *, gpu: bool | None = None,
                  tile_n: int | None = None, num_warps: int = 4, num_stages: int = 3) -> DecodeConfig:
    """Tile sizes for a GQA group and head_dim on a GPU (``gpu=True``) or the interpreter."""
    gpu = runtime.BACKEND == "cuda" if gpu is None else gpu
    min_dot = 16 if gpu else 1  # the interpreter accepts any tl.dot shape; small tiles run faster there
    return DecodeConfig(
        tile_n=tile_n or 64,
        group_pad=max(min_dot, _next_pow2(group)),
        head_dim_pad=max(min_dot, _next_pow2(head_dim)),
        num_warps=num_warps,
        num_stages=num_stages,
        dot_fp32=dtype == torch.float32 or (dtype == torch.bfloat16 and not gpu),
    )


def splits_for(programs: int, num_sms: int, max_len: int) -> int:
    """Split-K policy: about two programs per SM, no split shorter than ``MIN_TOKENS_PER_SPLIT``.

    ``programs`` is sequences x KV heads, the parallelism there is without splitting.
    """
    if programs >= 2 * num_sms:
        return 1
    wanted = -(-2 * num_sms // programs)
    return max(1, min(wanted, max_len // MIN_TOKENS_PER_SPLIT, MAX_SPLITS))


def choose_num_splits(batch: int, num_kv_heads: int, max_len: int, device: torch.device) -> int:
    """Automatic split-K: split only when (sequence, KV head) programs cannot fill the GPU.

    Batch 1 of Llama-3.2-1B has 8 KV heads, so 8 programs for an H200's 132 SMs: 94% of the
    chip would idle. Splitting each sequence into S chunks makes 8*S programs. On a CPU the
    interpreter runs programs one after another, so splitting only adds work: never split.
    """
    if device.type != "cuda":
        return 1
    num_sms = torch.cuda.get_device_properties(device).multi_processor_count
    return splits_for(batch * num_kv_heads, num_sms, max_len)


# --- the kernels ---------------------------------------------------------------------------

@triton.jit
def paged_decode_kernel(
    q_ptr,              # [batch, num_heads, head_dim], one query token per sequence
    k_cache_ptr,        # [num_blocks, block_size, num_kv_heads, head_dim], any strides but head_dim's
    v_cache_ptr,        # same shape and strides as k_cache
    block_tables_ptr,   # int32 [batch, max_blocks]; entries past a sequence are never read
    seq_lens_ptr,       # int32 [batch], contiguous: tokens in the cache, the new one included
    out_ptr,            # [batch, num_heads, head_dim], or float32 [batch, num_heads, num_splits, head_dim] with split-K
    lse_ptr,            # float32 [batch, num_heads, num_splits], base-2 log-sum-exp (split-K only)
    qk_scale,           # softmax scale * log2(e)
    num_splits,         # splits of each sequence's positions
    stride_qb, stride_qh,                          # q's strides: sequence, head
    stride_cblock, stride_ctoken, stride_chead,    # the caches' strides: block, slot in block, KV head
    stride_tb,                                     # block_tables' row stride
    stride_ob, stride_oh, stride_os,               # out's strides: sequence, head, split (0 without split-K)
    stride_lb, stride_lh,                          # lse's strides: sequence, head
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr,
    WRITE_LSE: tl.constexpr, DOT_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """One program: sequence ``program_id(0)``, KV head ``program_id(1)``, split ``program_id(2)``.

    Without split-K (``WRITE_LSE=False``) it writes the normalised output. With it, it writes
    its split's normalised partial output and base-2 log-sum-exp for stage 2 to merge.
    """
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    # This split's token range; chunks are whole tiles so only a split's last tile is ragged.
    seq_len = tl.load(seq_lens_ptr + seq)
    chunk = tl.cdiv(tl.cdiv(seq_len, num_splits), TILE_N) * TILE_N
    start = split * chunk
    end = tl.minimum(start + chunk, seq_len)

    # GQA packing: the GROUP query heads that share this KV head form the rows of one tile.
    offs_g = tl.arange(0, GROUP_PAD)
    mask_g = offs_g < GROUP
    heads = kv_head * GROUP + offs_g
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    q_mask = mask_g[:, None] & mask_d[None, :]
    q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=q_mask, other=0.0)
    q = q.to(DOT_DTYPE)

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM_PAD], tl.float32)
    table_row = block_tables_ptr + seq * stride_tb
    for tile_start in tl.range(start, end, TILE_N):
        offs_n = tile_start + tl.arange(0, TILE_N)
        mask_n = offs_n < end
        # Block-table indirection: page = table[pos // B] is the physical block, pos % B the slot in it;
        # masked positions (past the sequence) never load their table entry, which may be -1. (Written
        # inline: in the interpreter every call of a @triton.jit helper re-patches triton.language.)
        page = tl.load(table_row + offs_n // BLOCK_SIZE, mask=mask_n, other=0).to(tl.int64)
        rows = page * stride_cblock + (offs_n % BLOCK_SIZE) * stride_ctoken + kv_head * stride_chead
        if HEAD_DIM == HEAD_DIM_PAD:  # no column mask: lets the compiler vectorise loads along head_dim
            kv_mask = mask_n[:, None]
        else:
            kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_cache_ptr + rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0).to(DOT_DTYPE)
        v = tl.load(v_cache_ptr + rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0).to(DOT_DTYPE)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # [GROUP_PAD, TILE_N], base-2 logits
        qk = tl.where(mask_n[None, :], qk, float("-inf"))
        # Online softmax: a larger max rescales the old sum and output by alpha = exp2(m_old - m_new),
        # which is what keeps exp2 from overflowing.
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    # An empty split (its range starts past the sequence) has l_i = 0: output 0, lse -inf.
    safe_l = tl.where(l_i > 0, l_i, 1.0)
    out = acc / safe_l[:, None]
    o_ptrs = out_ptr + seq * stride_ob + heads[:, None] * stride_oh + split * stride_os + offs_d[None, :]
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=q_mask)
    if WRITE_LSE:
        lse = tl.where(l_i > 0, m_i + tl.log2(safe_l), float("-inf"))
        tl.store(lse_ptr + seq * stride_lb + heads * stride_lh + split, lse, mask=mask_g)


@triton.jit
def merge_splits_kernel(
    part_ptr,                          # float32 [batch, num_heads, num_splits, head_dim]
    lse_ptr,                           # float32 [batch, num_heads, num_splits]
    out_ptr,                           # [batch, num_heads, head_dim]
    num_splits,                        # splits stage 1 wrote (<= SPLITS_PAD)
    stride_pb, stride_ph, stride_ps,   # part's strides: sequence, head, split
    stride_lb, stride_lh,              # lse's strides: sequence, head
    stride_ob, stride_oh,              # out's strides: sequence, head
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, SPLITS_PAD: tl.constexpr,
):
    """Stage 2, one program per (sequence, query head): a softmax over the splits.

    Split s covered tokens whose exp-sum is 2**lse[s], so its share of the whole is
    2**(lse[s] - max) / sum(...); the output is the share-weighted mean of the partial outputs.
    """
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, SPLITS_PAD)
    mask_s = offs_s < num_splits
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    lse = tl.load(lse_ptr + seq * stride_lb + head * stride_lh + offs_s, mask=mask_s, other=float("-inf"))
    weights = tl.exp2(lse - tl.max(lse, 0))  # split 0 always holds tokens, so the max is finite
    part = tl.load(part_ptr + seq * stride_pb + head * stride_ph + offs_s[:, None] * stride_ps + offs_d[None, :],
                   mask=mask_s[:, None] & mask_d[None, :], other=0.0)
    out = tl.sum(weights[:, None] * part, 0) / tl.sum(weights, 0)
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty), mask=mask_d)


# --- the launcher ------------------------------------------------------------------------

def paged_decode_attention_triton(
    q: torch.Tensor,              # [batch, num_heads, head_dim]
    k_cache: torch.Tensor,        # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,        # same shape as k_cache
    block_tables: torch.Tensor,   # int32 [batch, max_blocks]
    seq_lens: torch.Tensor,       # int32 [batch], the new token included
    scale: float,
    num_splits: int,
    out: torch.Tensor,            # [batch, num_heads, head_dim], q's dtype
    config: DecodeConfig | None = None,
) -> torch.Tensor:
    """Launch stage 1 (and stage 2 when ``num_splits > 1``); inputs must be validated already."""
    batch, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    cfg = config or launch_config(group, head_dim, q.dtype)
    q = q if q.stride(-1) == 1 else q.contiguous()
    seq_lens = seq_lens.contiguous()  # the kernel reads seq_lens[b] at offset b
    common = dict(GROUP=group, GROUP_PAD=cfg.group_pad, HEAD_DIM=head_dim, HEAD_DIM_PAD=cfg.head_dim_pad,
                  BLOCK_SIZE=block_size, TILE_N=cfg.tile_n,
                  DOT_DTYPE=tl.float32 if cfg.dot_fp32 else _TL_DTYPES[q.dtype],
                  DOT_PRECISION="ieee" if cfg.dot_fp32 else "tf32",
                  num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    cache_strides = (k_cache.stride(0), k_cache.stride(1), k_cache.stride(2))
    grid = (batch, num_kv_heads, num_splits)
    if num_splits == 1:  # stage 1 writes the answer itself: no partials, no log-sum-exp
        part, lse, part_strides, lse_strides = out, out, (out.stride(0), out.stride(1), 0), (0, 0)
    else:
        part = torch.empty(batch, num_heads, num_splits, head_dim, dtype=torch.float32, device=q.device)
        lse = torch.empty(batch, num_heads, num_splits, dtype=torch.float32, device=q.device)
        part_strides, lse_strides = part.stride()[:3], lse.stride()[:2]
    paged_decode_kernel[grid](
        q, k_cache, v_cache, block_tables, seq_lens, part, lse,
        scale * LOG2E, num_splits,
        q.stride(0), q.stride(1), *cache_strides, block_tables.stride(0), *part_strides, *lse_strides,
        WRITE_LSE=num_splits > 1, **common,
    )
    if num_splits == 1:
        return out
    merge_splits_kernel[(batch, num_heads)](
        part, lse, out, num_splits,
        part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, HEAD_DIM_PAD=_next_pow2(head_dim), SPLITS_PAD=_next_pow2(num_splits),
        num_warps=4,
    )
    return out


def default_scale(head_dim: int) -> float:
    """1/sqrt(head_dim), the scale every Llama-style model uses."""
    return 1.0 / math.sqrt(head_dim)
