"""Paged attention: slot-mapped K/V writes and decode attention over a paged cache (ch. 3-4).

Two public operations, each with a plain-PyTorch backend (the readable reference) and a
Triton backend (the fast kernel, compiled on a GPU or interpreted on a CPU):

* :func:`store_kv` writes new tokens' K and V into their cache slots;
* :func:`paged_decode_attention` lets one new query token per sequence attend to all of
  that sequence's cached tokens, found through its block table.

Both validate their arguments on the host and raise ``ValueError`` naming the bad value
before anything is launched or written.
"""

from __future__ import annotations

import torch

from .reference import (
    gather_kv,
    paged_decode_attention_float64,
    paged_decode_attention_torch,
    sdpa_decode_attention,
    slots_for,
    store_kv_torch,
)
from .triton_decode import MAX_SPLITS, DecodeConfig, choose_num_splits, default_scale, paged_decode_attention_triton
from .triton_store import store_kv_triton
from .validate import BACKENDS, check_backend, check_decode_inputs, check_store_inputs

__all__ = [
    "BACKENDS",
    "check_backend",
    "store_kv",
    "paged_decode_attention",
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
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype or out.device != q.device
                            or out.stride(-1) != 1):
        raise ValueError(
            f"out must match q ({tuple(q.shape)}, {q.dtype}, {q.device}, last dim contiguous); got "
            f"{tuple(out.shape)}, {out.dtype}, {out.device}, strides {out.stride()}"
        )
    scale = default_scale(q.shape[-1]) if scale is None else float(scale)

    if backend == "torch":
        result = paged_decode_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, scale, check=False)
        return result if out is None else out.copy_(result)

    if num_splits is None:
        num_splits = choose_num_splits(q.shape[0], k_cache.shape[2], max_len, q.device)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
    return paged_decode_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits, out,
                                         config)
