"""Paged attention in plain PyTorch: gather through the block table, then ordinary attention (chapter 3).

:func:`paged_attention_torch` is the one PyTorch path (``backend="torch"``, the CPU engine's): whole-block
gathers, planned once per step. The oracles for everything: :func:`sdpa_decode_attention` over
contiguous K/V (it knows no blocks), and the float64 yardsticks (:func:`paged_attention_float64`),
written apart from the code they measure, for the kernels' rounding in every dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

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
    check: bool = True,
) -> torch.Tensor:
    """Decode attention (one query per sequence, ``[batch, num_heads, head_dim]``): :func:`paged_attention_torch`."""
    if check:
        check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    starts = torch.arange(q.shape[0] + 1, dtype=torch.int32, device=q.device)
    return paged_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, starts, scale, check=False)


def paged_decode_attention_float64(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """The decode yardstick in float64, from the (possibly bf16) cache contents: :func:`paged_attention_float64`."""
    starts = torch.arange(q.shape[0] + 1, dtype=torch.int32, device=q.device)
    return paged_attention_float64(q, k_cache, v_cache, block_tables, seq_lens, starts, scale)


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


@dataclass(frozen=True)
class GatherPlan:
    """Index tensors of one step's torch attention, built once from its tables and reused by every layer."""

    decode_rows: torch.Tensor | None     # token rows of the one-token sequences
    decode_blocks: torch.Tensor | None   # [num_decodes * width] their tables' blocks (padding repeats block 0)
    decode_bias: torch.Tensor | None     # [num_decodes, 1, 1, width * block_size]: 0 at a real position, -inf after
    decode_pad: torch.Tensor | None      # [num_decodes, width * block_size, 1, 1]: True past each sequence's end
    prefills: tuple[tuple[int, int, int, torch.Tensor], ...]   # (first token row, query length, context length, blocks)


def gather_plan(block_tables: torch.Tensor, seq_lens: Sequence[int], query_lens: Sequence[int], block_size: int,
                dtype: torch.dtype) -> GatherPlan:
    """Which whole blocks each sequence reads: the one-token rows batched over a padded width, the others alone."""
    device = block_tables.device
    starts = [0]
    for n in query_lens:
        starts.append(starts[-1] + n)
    one = [i for i, n in enumerate(query_lens) if n == 1]
    rows = blocks = bias = pad = None
    if one:
        seqs = torch.tensor(one, device=device)
        rows = torch.tensor([starts[i] for i in one], device=device)
        lens = torch.tensor([seq_lens[i] for i in one], device=device)
        width = -(-max(seq_lens[i] for i in one) // block_size)
        table = block_tables[seqs][:, :width].to(torch.int64)
        used = torch.arange(width, device=device)[None, :] < (lens[:, None] + block_size - 1) // block_size
        blocks = torch.where(used, table, table[:, :1]).flatten()   # padding re-reads a real block
        pos = torch.arange(width * block_size, device=device)
        pad = pos[None, :] >= lens[:, None]
        bias = torch.zeros(len(one), width * block_size, dtype=dtype, device=device).masked_fill_(pad, float("-inf"))
        bias = bias[:, None, None, :]
        pad = pad[:, :, None, None]
    prefills = tuple((starts[i], n, seq_lens[i], block_tables[i, :-(-seq_lens[i] // block_size)].to(torch.int64))
                     for i, n in enumerate(query_lens) if n > 1)
    return GatherPlan(rows, blocks, bias, pad, prefills)


def paged_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float | None = None,
    *,
    check: bool = True,
    plan: GatherPlan | None = None,
    fresh: tuple[torch.Tensor, torch.Tensor] | None = None,
    scrub: bool = True,
) -> torch.Tensor:
    """The one PyTorch paged attention: ``q`` is ``[num_tokens, num_heads, head_dim]`` packed by sequence.

    Sequence ``s`` owns rows ``query_start_loc[s] : query_start_loc[s+1]`` of ``q``. K/V are read as
    whole blocks (one copy per block, not per slot); the one-token rows attend in one batched SDPA
    with padding masked, each longer query run over its own blocks, causally after its prefix.
    ``plan`` is the step's :func:`gather_plan` (built here if not given: the engine builds it once per
    step); ``fresh``, the step's own K/V of this layer, spares the gather of a prompt with nothing cached.
    A whole block holds slots past a sequence's end: ``scrub`` zeroes them, since a masked weight times
    a NaN slot is NaN (test caches are poisoned); the engine's cache, zeroed and written only with
    finite K/V, skips it. Computes in ``q``'s dtype, as the engine runs it.
    """
    if check:
        check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if plan is None:
        starts = query_start_loc.detach().to("cpu", torch.int64).tolist()
        plan = gather_plan(block_tables, seq_lens.detach().cpu().tolist(),
                           [b - a for a, b in zip(starts, starts[1:])], k_cache.shape[1], q.dtype)
    out = torch.zeros_like(q)
    if plan.decode_rows is not None:
        k = k_cache.index_select(0, plan.decode_blocks).view(plan.decode_bias.shape[0], -1, *k_cache.shape[2:])
        v = v_cache.index_select(0, plan.decode_blocks).view(k.shape)
        if scrub:
            k, v = k.masked_fill_(plan.decode_pad, 0), v.masked_fill_(plan.decode_pad, 0)
        rows = torch.nn.functional.scaled_dot_product_attention(
            q[plan.decode_rows][:, :, None, :], k.transpose(1, 2), v.transpose(1, 2), attn_mask=plan.decode_bias,
            scale=scale, enable_gqa=True)[:, :, 0, :]
        if not plan.prefills:   # a decode step: the rows are the whole output, in order
            return rows
        out[plan.decode_rows] = rows
    for start, n, length, blocks in plan.prefills:
        if length == n and fresh is not None:    # all of its context is this step's: no gather at all
            k, v = fresh[0][start:start + n], fresh[1][start:start + n]
        else:
            k = k_cache.index_select(0, blocks).flatten(0, 1)[:length]
            v = v_cache.index_select(0, blocks).flatten(0, 1)[:length]
        out[start:start + n] = prefix_causal_sdpa(q[start:start + n], k, v, scale)
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
    """The yardstick, in float64 from the (possibly bf16) cache contents: each sequence gathered slot by slot.

    Written apart from :func:`paged_attention_torch` on purpose: a yardstick must not share the code it measures.
    """
    check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    starts = query_start_loc.detach().to("cpu", torch.int64).tolist()
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    for s, length in enumerate(seq_lens.detach().to("cpu", torch.int64).tolist()):
        a, b = starts[s], starts[s + 1]
        if b > a:
            k = gather_kv(k_cache, block_tables[s], length).to(torch.float64)
            v = gather_kv(v_cache, block_tables[s], length).to(torch.float64)
            out[a:b] = prefix_causal_sdpa(q[a:b].to(torch.float64), k, v, scale)
    return out
