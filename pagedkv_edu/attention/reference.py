"""Paged attention in plain PyTorch: gather through the block table, then ordinary attention (chapter 3).

These are the oracles for everything faster: :func:`sdpa_decode_attention` over contiguous K/V
(it knows no blocks), the gather references (``backend="torch"``, batched so they are a fair
speed baseline), and their float64 twins, the yardstick for the kernels' rounding in every dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .validate import check_decode_inputs, check_paged_inputs


def slots_for(block_table: Sequence[int] | torch.Tensor, seq_len: int, block_size: int) -> torch.Tensor:
    """Cache slots of positions ``0 .. seq_len-1`` of one sequence (int64)."""
    table = torch.as_tensor(block_table, dtype=torch.int64)
    pos = torch.arange(seq_len, device=table.device)
    return table[pos // block_size] * block_size + pos % block_size


def gather_kv(cache: torch.Tensor, block_table: Sequence[int] | torch.Tensor, seq_len: int) -> torch.Tensor:
    """The contiguous ``[seq_len, num_kv_heads, head_dim]`` K (or V) of one sequence.

    ``cache`` is one layer's K or V cache, ``[num_blocks, block_size, num_kv_heads, head_dim]``;
    only the first ``ceil(seq_len / block_size)`` entries of ``block_table`` are read.
    """
    num_blocks, block_size, num_kv_heads, head_dim = cache.shape
    needed = -(-seq_len // block_size)
    table = torch.as_tensor(block_table, dtype=torch.int64).flatten().cpu()
    if seq_len < 0 or needed > table.numel():
        raise ValueError(f"seq_len {seq_len} needs {needed} blocks of {block_size}, the table has {table.numel()}")
    used = table[:needed]
    if bool(((used < 0) | (used >= num_blocks)).any()):
        raise ValueError(f"block table {used.tolist()} names a block outside 0..{num_blocks - 1}")
    slots = slots_for(used, seq_len, block_size).to(cache.device)
    return cache.reshape(num_blocks * block_size, num_kv_heads, head_dim)[slots]


def store_kv_torch(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Write token ``i``'s K and V into flat slot ``slot_mapping[i]`` (skip -1), in place."""
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].to(torch.int64)
    k_cache.view(num_blocks * block_size, num_kv_heads, head_dim).index_copy_(0, slots, k[keep])
    v_cache.view(num_blocks * block_size, num_kv_heads, head_dim).index_copy_(0, slots, v[keep])


def paged_decode_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    *,
    compute_dtype: torch.dtype = torch.float32,
    check: bool = True,
) -> torch.Tensor:
    """Decode attention by gathering each sequence's K/V, batched over padded positions.

    Returns ``[batch, num_heads, head_dim]`` in ``q``'s dtype, or in ``compute_dtype`` when
    that is float64 (the reference must not round its own answer).
    """
    max_len = check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens) if check else int(seq_lens.max())
    batch, num_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale

    pos = torch.arange(max_len, device=q.device)
    valid = pos[None, :] < seq_lens[:, None].to(torch.int64)  # [batch, max_len]
    blocks = block_tables[:, pos // block_size].to(torch.int64)  # unused entries may be -1 ...
    slots = blocks * block_size + pos % block_size
    # ... so padded positions re-read the sequence's first slot instead: it holds a real key (an
    # unwritten slot may hold NaN, and NaN survives the mask), and the mask drops it.
    slots = torch.where(valid, slots, slots[:, :1]).view(-1)
    flat_k = k_cache.view(num_blocks * block_size, num_kv_heads, head_dim)
    flat_v = v_cache.view(num_blocks * block_size, num_kv_heads, head_dim)
    k = flat_k.index_select(0, slots).view(batch, max_len, num_kv_heads, head_dim).to(compute_dtype)
    v = flat_v.index_select(0, slots).view(batch, max_len, num_kv_heads, head_dim).to(compute_dtype)

    # SDPA does the softmax(q k^T * scale) v; enable_gqa lets each KV head serve its `group` query heads.
    # (Spelled out with einsum it computes the same, several times slower on a CPU, where this path serves.)
    out = torch.nn.functional.scaled_dot_product_attention(
        q.to(compute_dtype)[:, :, None, :], k.transpose(1, 2), v.transpose(1, 2),
        attn_mask=valid[:, None, None, :], scale=scale, enable_gqa=group > 1,
    )[:, :, 0, :]
    return out if compute_dtype == torch.float64 else out.to(q.dtype)


def paged_decode_attention_float64(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """The gather reference computed in float64 from the (possibly bf16) cache contents."""
    return paged_decode_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, scale,
                                        compute_dtype=torch.float64)


def sdpa_decode_attention(
    q: torch.Tensor, keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor], scale: float | None = None
) -> torch.Tensor:
    """The oracle: SDPA over each sequence's contiguous ``[len, num_kv_heads, head_dim]`` K/V.

    One query token per sequence attends to all of that sequence's keys (no mask needed).
    """
    if not len(keys) == len(values) == q.shape[0]:
        raise ValueError(f"{q.shape[0]} queries but {len(keys)} key and {len(values)} value tensors")
    return torch.cat([prefix_causal_sdpa(q[i:i + 1], k, v, scale) for i, (k, v) in enumerate(zip(keys, values))])


def prefix_causal_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None) -> torch.Tensor:
    """``n`` new queries ``[n, num_heads, head_dim]`` over their sequence's ``L`` keys ``[L, num_kv_heads, head_dim]``.

    The queries are the last ``n`` positions: query ``i`` sits at ``L - n + i`` and sees keys
    ``0 ..`` that position (the cached prefix, then the new tokens causally). With nothing
    cached that is the usual causal mask, and one query sees every key: both skip the mask.
    """
    n, length = q.shape[0], k.shape[0]
    qh, kh, vh = q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if n == length:
        out = sdpa(qh, kh, vh, is_causal=n > 1, scale=scale, enable_gqa=True)
    elif n == 1:
        out = sdpa(qh, kh, vh, scale=scale, enable_gqa=True)
    else:
        visible = torch.arange(length, device=q.device)[None, :] <= torch.arange(length - n, length,
                                                                                  device=q.device)[:, None]
        out = sdpa(qh, kh, vh, attn_mask=visible, scale=scale, enable_gqa=True)
    return out[0].transpose(0, 1)


def paged_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float | None = None,
    *,
    compute_dtype: torch.dtype = torch.float32,
    check: bool = True,
) -> torch.Tensor:
    """Varlen paged attention by gathering: ``q`` is ``[num_tokens, num_heads, head_dim]`` packed by sequence.

    Sequence ``s`` owns rows ``query_start_loc[s] : query_start_loc[s+1]`` of ``q``: its last
    new tokens. A step whose every sequence brings one token takes the batched decode path;
    otherwise each sequence's K/V is gathered through its block table and attended with a
    causal-from-the-prefix mask. Returns ``q``'s dtype, or float64 when ``compute_dtype`` is.
    """
    if check:
        check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc)
    head_dim = q.shape[-1]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    starts = query_start_loc.detach().to("cpu", torch.int64).tolist()
    lens = seq_lens.detach().to("cpu", torch.int64).tolist()
    if all(b - a == 1 for a, b in zip(starts, starts[1:])):
        return paged_decode_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, scale,
                                            compute_dtype=compute_dtype, check=False)
    out_dtype = torch.float64 if compute_dtype == torch.float64 else q.dtype
    out = torch.zeros(q.shape, dtype=out_dtype, device=q.device)
    for s, length in enumerate(lens):
        a, b = starts[s], starts[s + 1]
        if b == a:
            continue
        k = gather_kv(k_cache, block_tables[s], length).to(compute_dtype)
        v = gather_kv(v_cache, block_tables[s], length).to(compute_dtype)
        out[a:b] = prefix_causal_sdpa(q[a:b].to(compute_dtype), k, v, scale).to(out_dtype)
    return out


def paged_attention_float64(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """The varlen gather reference in float64: the yardstick for the unified kernel."""
    return paged_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
                                 compute_dtype=torch.float64)
