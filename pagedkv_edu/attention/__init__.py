"""Paged attention: slot-mapped K/V writes and attention over a paged cache (chapters 3-5).

:func:`store_kv`, :func:`paged_decode_attention` (one new token per sequence) and
:func:`paged_attention` (any step: prompts, chunks, prefix hits, decode tokens, packed end to end)
each have a PyTorch reference backend and a Triton one; a reader's kernel can be the ``backend``.
Every entry point validates on the host and raises ``ValueError`` before anything is launched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .reference import (
    gather_kv,
    paged_decode_attention_float64,
    paged_attention_float64,
    paged_attention_torch,
    paged_decode_attention_torch,
    sdpa_decode_attention,
    slots_for,
    store_kv_torch,
)
from .triton_decode import MAX_SPLITS, DecodeConfig, choose_num_splits, default_scale, paged_decode_attention_triton
from .triton_store import store_kv_triton
from .triton_unified import UnifiedConfig, unified_attention_triton
from .validate import BACKENDS, MAX_HEAD_DIM, check_backend, check_decode_inputs, check_paged_inputs, check_store_inputs

__all__ = [
    "BACKENDS",
    "check_backend",
    "store_kv",
    "paged_decode_attention",
    "paged_attention",
    "kernel_name",
    "AttentionFn",
    "paged_attention_float64",
    "gather_kv",
    "slots_for",
    "paged_decode_attention_float64",
    "sdpa_decode_attention",
]

def store_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    backend: str = "torch",
    *,
    check: bool = True,
) -> None:
    """Write ``k[i]``, ``v[i]`` (``[N, num_kv_heads, head_dim]``) to slot ``slot_mapping[i]``, in place.

    ``slot = block * block_size + offset``; -1 skips a padding token. ``check=False`` skips
    the host-side validation (for hot loops whose inputs were validated before).
    """
    check_backend(backend)
    if check:
        check_store_inputs(k, v, k_cache, v_cache, slot_mapping)
    if backend == "torch":
        store_kv_torch(k, v, k_cache, v_cache, slot_mapping)
    else:
        store_kv_triton(k, v, k_cache, v_cache, slot_mapping)


def _check_out(out: torch.Tensor | None, q: torch.Tensor) -> None:
    """An ``out=`` buffer must match ``q`` (shape, dtype, device) with a contiguous last dimension."""
    if out is not None and (not isinstance(out, torch.Tensor) or out.shape != q.shape or out.dtype != q.dtype
                            or out.device != q.device or out.stride(-1) != 1):
        desc = (f"{tuple(out.shape)}, {out.dtype}, {out.device}, strides {out.stride()}"
                if isinstance(out, torch.Tensor) else type(out).__name__)
        raise ValueError(f"out must match q ({tuple(q.shape)}, {q.dtype}, {q.device}, last dim contiguous); "
                         f"got {desc}")


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    backend: str = "triton",
    num_splits: int | None = None,
    *,
    out: torch.Tensor | None = None,
    check: bool = True,
    config: DecodeConfig | None = None,
) -> torch.Tensor:
    """Decode attention of ``q`` (``[batch, num_heads, head_dim]``) over a paged cache.

    Sequence ``b`` attends to its ``seq_lens[b]`` cached tokens, which live in the blocks
    ``block_tables[b, :ceil(seq_lens[b] / block_size)]`` (later entries are never read). The
    caller stores the new token's K/V first. Returns ``[batch, num_heads, head_dim]`` in
    ``q``'s dtype, written into ``out`` when given.

    ``num_splits``: None chooses split-K automatically (only when sequences x KV heads cannot
    fill the GPU), an int forces it (1 = no split). ``backend="torch"`` is the gather
    reference and ignores it. ``config`` overrides the Triton tile sizes (benchmarks only).
    """
    check_backend(backend)
    if num_splits is not None and (not isinstance(num_splits, int) or not 1 <= num_splits <= MAX_SPLITS):
        raise ValueError(f"num_splits must be None or an integer in 1..{MAX_SPLITS}, got {num_splits!r}")
    if check:
        max_len = check_decode_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    else:
        max_len = block_tables.shape[1] * k_cache.shape[1]  # an upper bound; needs no device sync
    _check_out(out, q)
    scale = default_scale(q.shape[-1]) if scale is None else float(scale)

    if backend == "torch":
        result = paged_decode_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, scale, check=False)
        return result if out is None else out.copy_(result)

    if num_splits is None:
        num_splits = choose_num_splits(q.shape[0], k_cache.shape[2], max_len, q.device)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
    return paged_decode_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits, out,
                                         config)


AttentionFn = Callable[..., torch.Tensor]
"""A custom backend: ``fn(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale) -> Tensor``."""


def kernel_name(query_lens: Sequence[int] | torch.Tensor, backend: str | AttentionFn) -> str:
    """What :func:`paged_attention` runs for a step with these query lengths and this backend.

    ``"triton-decode"`` when every sequence brings exactly one token, ``"triton-unified"``
    otherwise; ``"torch-gather"`` for the reference; ``"custom:<name>"`` for a callable.
    """
    if callable(backend):
        return f"custom:{getattr(backend, '__name__', type(backend).__name__)}"
    check_backend(backend)
    if backend == "torch":
        return "torch-gather"
    lens = query_lens.tolist() if isinstance(query_lens, torch.Tensor) else list(query_lens)
    return "triton-decode" if lens and all(n == 1 for n in lens) else "triton-unified"


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float | None = None,
    backend: str | AttentionFn = "triton",
    *,
    out: torch.Tensor | None = None,
    check: bool = True,
    max_query_len: int | None = None,
    config: UnifiedConfig | None = None,
) -> torch.Tensor:
    """Attention of every new token of a step over its sequence's paged cache, in one call.

    ``q`` is ``[num_tokens, num_heads, head_dim]``, the new tokens packed sequence by sequence;
    sequence ``s`` owns rows ``query_start_loc[s] : query_start_loc[s+1]`` (possibly none).
    ``seq_lens[s]`` counts its cached tokens *including* the new ones, whose K/V the caller
    has stored already. Query ``i`` of sequence ``s`` sits at ``seq_lens[s] - q_len + i`` and
    sees keys ``0 ..`` that position. Returns ``[num_tokens, num_heads, head_dim]`` in ``q``'s
    dtype, written into ``out`` when given (rows of nothing are left as they were: there are none).

    ``backend``: ``"triton"`` (decode kernel when every query length is 1, else the unified
    kernel), ``"torch"`` (gather reference), or a callable with the positional signature
    ``(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale)``, validated for
    like the others. ``check=False`` skips validation (hot loops whose inputs were checked);
    ``max_query_len`` is the longest query, when the caller knows it, which saves a device
    sync in the dispatch. ``config`` overrides the unified kernel's tiles (benchmarks only).
    """
    custom = callable(backend)
    if not custom:
        check_backend(backend)
    _check_out(out, q)
    context_lens: list[int] | None = None
    if check:
        q_lens, context_lens = check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc,
                                       max_head_dim=MAX_HEAD_DIM if backend == "triton" else None)
        max_query_len = max(q_lens)
    scale = default_scale(q.shape[-1]) if scale is None else float(scale)

    if custom:
        result = backend(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale)
        if not isinstance(result, torch.Tensor) or result.shape != q.shape:
            desc = tuple(result.shape) if isinstance(result, torch.Tensor) else type(result).__name__
            raise ValueError(f"backend {kernel_name((), backend)} returned {desc}; expected {tuple(q.shape)}")
        return result.to(q.dtype) if out is None else out.copy_(result)
    if backend == "torch":
        result = paged_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
                                       check=False)
        return result if out is None else out.copy_(result)

    num_seqs = seq_lens.shape[0]
    if max_query_len is None and q.shape[0] == num_seqs:  # ambiguous: (1, 1) or (0, 2)? read the lengths
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max())
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
    if q.shape[0] == num_seqs and max_query_len == 1:  # every sequence brings exactly one token
        # The longest context decides split-K; without validation, the table's capacity bounds it (no sync).
        max_len = max(context_lens) if context_lens else block_tables.shape[1] * k_cache.shape[1]
        splits = choose_num_splits(num_seqs, k_cache.shape[2], max_len, q.device)
        return paged_decode_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, scale, splits, out)
    return unified_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale, out,
                                    config, max_query_len)
