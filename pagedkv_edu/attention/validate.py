"""Checks that run on the host before any kernel touches memory.

A Triton kernel does not bounds-check: a bad block id or a table too short reads (or writes)
somebody else's memory and returns a plausible wrong answer. The price is one small host copy of
``seq_lens`` and the table; hot loops that validated once pass ``check=False``.
"""

from __future__ import annotations

import torch

SUPPORTED_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16)
"""Cache dtypes the kernels and the reference accept."""

_INDEX_DTYPES = (torch.int32, torch.int64)

MAX_HEAD_DIM = 256
"""Largest head_dim the Triton kernels take: a [rows, head_dim] fp32 accumulator beyond it spills on a GPU."""


BACKENDS: tuple[str, ...] = ("torch", "triton")
"""The two implementations of every kernel: PyTorch operations, or the book's Triton kernels."""


def check_backend(backend: str) -> None:
    """Refuse a backend that is not one of :data:`BACKENDS`, naming it."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def check_cache_pair(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int, int, int]:
    """K and V caches in NHD layout: return (num_blocks, block_size, num_kv_heads, head_dim)."""
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(cache, torch.Tensor) or cache.dim() != 4:
            shape = tuple(cache.shape) if isinstance(cache, torch.Tensor) else type(cache).__name__
            raise ValueError(f"{name} must be a 4-d tensor [num_blocks, block_size, num_kv_heads, head_dim], got {shape}")
        if cache.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"{name} has dtype {cache.dtype}; supported: {', '.join(map(str, SUPPORTED_DTYPES))}")
        if not cache.is_contiguous():
            raise ValueError(f"{name} must be contiguous (NHD layout, head_dim innermost); got strides {cache.stride()}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache shape {tuple(k_cache.shape)} != v_cache shape {tuple(v_cache.shape)}")
    if k_cache.dtype != v_cache.dtype:
        raise ValueError(f"k_cache dtype {k_cache.dtype} != v_cache dtype {v_cache.dtype}")
    if k_cache.device != v_cache.device:
        raise ValueError(f"k_cache is on {k_cache.device} but v_cache is on {v_cache.device}")
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    if min(num_blocks, block_size, num_kv_heads, head_dim) <= 0:
        raise ValueError(f"every cache dimension must be positive, got {tuple(k_cache.shape)}")
    return num_blocks, block_size, num_kv_heads, head_dim


def _tensor(name: str, t: object, dims: int, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dim() != dims:
        shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name} must be a {dims}-d tensor {what}, got {shape}")
    return t


def _index_tensor(name: str, t: object, dims: int, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dtype not in _INDEX_DTYPES or t.dim() != dims:
        desc = f"{t.dtype} tensor of shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name} must be an int32 (or int64) tensor {what}, got a {desc}")
    return t


def _on_cache_device(k_cache: torch.Tensor, **tensors: object) -> None:
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.device != k_cache.device:
            raise ValueError(f"{name} is on {t.device} but the cache is on {k_cache.device}")


def check_decode_inputs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
) -> int:
    """Validate a decode-attention call (one query per sequence); return the longest sequence length.

    A decode step is a varlen step whose query lengths are all 1, so :func:`check_paged_inputs`
    judges it. Unused block-table entries (past ``ceil(seq_len / block_size)``) may hold
    anything, for instance -1: they are neither checked nor read by the kernels.
    """
    batch = q.shape[0] if isinstance(q, torch.Tensor) and q.dim() == 3 else 0  # a bad q is named below
    if batch and isinstance(seq_lens, torch.Tensor) and seq_lens.dim() == 1 and seq_lens.shape[0] != batch:
        raise ValueError(f"batch sizes disagree: q has {batch} sequences, seq_lens {seq_lens.shape[0]}")
    device = k_cache.device if isinstance(k_cache, torch.Tensor) else None
    one_each = torch.arange(batch + 1, dtype=torch.int64, device=device)
    return max(check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, one_each)[1])


def _check_block_ids(block_tables: torch.Tensor, lens: torch.Tensor, block_size: int, num_blocks: int) -> None:
    """Every *used* table entry must name a block in [0, num_blocks)."""
    used = -(-lens // block_size)  # blocks each sequence occupies
    width = int(used.max())
    table = block_tables[:, :width].detach().to("cpu", torch.int64)
    in_use = torch.arange(width)[None, :] < used[:, None]
    bad = in_use & ((table < 0) | (table >= num_blocks))
    if bool(bad.any()):
        seq, logical = (int(x) for x in bad.nonzero()[0])
        raise ValueError(
            f"block_tables[{seq}, {logical}] = {int(table[seq, logical])} is not a block of the cache "
            f"(valid ids are 0..{num_blocks - 1}); sequence {seq} has {int(lens[seq])} tokens, so it uses "
            f"its first {int(used[seq])} entries"
        )


def check_store_inputs(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Validate a slot-mapped write: shapes, dtypes, devices, and every slot in range and unique."""
    num_blocks, block_size, num_kv_heads, head_dim = check_cache_pair(k_cache, v_cache)
    for name, t in (("k", k), ("v", v)):
        _tensor(name, t, 3, "[num_tokens, num_kv_heads, head_dim]")
        if tuple(t.shape[1:]) != (num_kv_heads, head_dim):
            raise ValueError(
                f"{name} has shape {tuple(t.shape)}, but the cache holds [num_kv_heads={num_kv_heads}, "
                f"head_dim={head_dim}] per token"
            )
        if t.dtype != k_cache.dtype:
            raise ValueError(f"{name} has dtype {t.dtype} but the cache has dtype {k_cache.dtype}; cast it first")
        _on_cache_device(k_cache, **{name: t})
    if k.shape != v.shape:
        raise ValueError(f"k shape {tuple(k.shape)} != v shape {tuple(v.shape)}")
    _index_tensor("slot_mapping", slot_mapping, 1, "[num_tokens]")
    if slot_mapping.shape[0] != k.shape[0]:
        raise ValueError(f"slot_mapping has {slot_mapping.shape[0]} entries for {k.shape[0]} tokens")
    _on_cache_device(k_cache, slot_mapping=slot_mapping)
    slots = slot_mapping.detach().to("cpu", torch.int64)
    num_slots = num_blocks * block_size
    bad = (slots < -1) | (slots >= num_slots)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"slot_mapping[{i}] = {int(slots[i])} is outside the cache's {num_slots} slots "
            f"({num_blocks} blocks x {block_size}); use -1 to skip a padding token"
        )
    valid = slots[slots >= 0]
    unique, counts = torch.unique(valid, return_counts=True)
    if bool((counts > 1).any()):
        slot = int(unique[counts > 1][0])
        raise ValueError(f"slot {slot} appears {int(counts[unique == slot][0])} times in slot_mapping: two tokens "
                         f"would overwrite each other")


def check_paged_inputs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    *,
    max_head_dim: int | None = None,
) -> tuple[list[int], list[int]]:
    """Validate a varlen paged-attention call (any number of new queries per sequence).

    Returns each sequence's query length and context length, read once on the host. A
    sequence may bring no queries; it must never bring more than its context holds, and its
    block table must cover ``ceil(seq_len / block_size)`` valid blocks. ``max_head_dim`` is
    the kernel's limit (None: any).
    """
    num_blocks, block_size, num_kv_heads, head_dim = check_cache_pair(k_cache, v_cache)
    if max_head_dim is not None and head_dim > max_head_dim:
        raise ValueError(f"head_dim {head_dim} is larger than the Triton kernels handle ({max_head_dim})")
    num_tokens, num_heads, q_dim = _tensor("q", q, 3, "[num_tokens, num_heads, head_dim]").shape
    if q_dim != head_dim:
        raise ValueError(f"q has head_dim {q_dim} but the cache has head_dim {head_dim}")
    if num_heads == 0 or num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not a positive multiple of num_kv_heads={num_kv_heads}: "
                         f"the GQA ratio {num_heads}/{num_kv_heads} must be an integer")
    if q.dtype != k_cache.dtype:
        raise ValueError(f"q has dtype {q.dtype} but the cache has dtype {k_cache.dtype}")
    _index_tensor("block_tables", block_tables, 2, "[num_seqs, max_blocks_per_seq]")
    _index_tensor("seq_lens", seq_lens, 1, "[num_seqs]")
    _index_tensor("query_start_loc", query_start_loc, 1, "[num_seqs + 1]")
    _on_cache_device(k_cache, q=q, block_tables=block_tables, seq_lens=seq_lens, query_start_loc=query_start_loc)
    num_seqs = seq_lens.shape[0]
    if num_seqs == 0:
        raise ValueError("seq_lens is empty: a step needs at least one sequence")
    if block_tables.shape[0] != num_seqs or query_start_loc.shape[0] != num_seqs + 1:
        raise ValueError(
            f"batch sizes disagree: seq_lens has {num_seqs} sequences, block_tables {block_tables.shape[0]} rows, "
            f"query_start_loc {query_start_loc.shape[0]} entries (needs num_seqs + 1 = {num_seqs + 1})"
        )
    if block_tables.stride(-1) != 1:
        raise ValueError(f"block_tables must be contiguous along its last dimension, got strides {block_tables.stride()}")

    starts = query_start_loc.detach().to("cpu", torch.int64)
    lens = seq_lens.detach().to("cpu", torch.int64)
    if int(starts[0]) != 0:
        raise ValueError(f"query_start_loc[0] = {int(starts[0])}: the packed queries must start at 0")
    q_lens = (starts[1:] - starts[:-1]).tolist()
    for s, n in enumerate(q_lens):
        if n < 0:
            raise ValueError(f"query length of sequence {s} is negative: query_start_loc[{s}] = {int(starts[s])} > "
                             f"query_start_loc[{s + 1}] = {int(starts[s + 1])}")
    if int(starts[-1]) != num_tokens:
        raise ValueError(f"query_start_loc[-1] = {int(starts[-1])} but q holds {num_tokens} tokens")
    capacity = block_tables.shape[1] * block_size
    for s, (n, length) in enumerate(zip(q_lens, lens.tolist())):
        if length < 0:
            raise ValueError(f"seq_lens[{s}] = {length} is negative")
        if n > length:
            raise ValueError(f"sequence {s} brings {n} queries but seq_lens[{s}] = {length}: a query length cannot "
                             f"exceed its sequence (seq_lens counts the new tokens too)")
        if length > capacity:
            raise ValueError(
                f"block table too short: seq_lens[{s}] = {length} exceeds the block table's capacity of "
                f"{block_tables.shape[1]} blocks x block_size {block_size} = {capacity} tokens"
            )
    if int(lens.max()) > 0:
        _check_block_ids(block_tables, lens, block_size, num_blocks)
    return q_lens, lens.tolist()
