"""A batch of sequences written into a paged cache, with its contiguous K/V kept as the oracle.

Chapter 3's experiment, and the kernels' tests and benchmarks, start here: blocks come from a pool
whose free list is shuffled (scattered, as after hours of serving), and every slot nobody wrote
is NaN, so a kernel that reads one returns NaN, not a plausible number. It uses both the allocator
and the kernels' store, so it sits above both, beside the model that reads such a cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

import torch

from .. import runtime
from ..attention.reference import store_kv_torch
from ..core.block_pool import BlockPool
from ..core.block_table import BlockTable, blocks_needed


@dataclass
class PagedBatch:
    """Decode inputs over a paged cache, plus the contiguous K/V they were built from."""

    q: torch.Tensor  # [batch, num_heads, head_dim]
    k_cache: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # int32 [batch, width]; unused entries hold ``table_fill``
    seq_lens: torch.Tensor  # int32 [batch]
    keys: list[torch.Tensor]  # the oracle: sequence i's contiguous K, [seq_lens[i], num_kv_heads, head_dim]
    values: list[torch.Tensor]
    tables: list[BlockTable]

    @property
    def block_size(self) -> int:
        return self.k_cache.shape[1]


def random_paged_batch(
    seq_lens: Sequence[int],
    block_size: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    seed: int = 0,
    *,
    spare_blocks: int | None = None,
    table_width: int | None = None,
    table_fill: int = -1,
    poison: bool = True,
) -> PagedBatch:
    """Random K/V/q for sequences of ``seq_lens`` tokens, stored through shuffled block tables.

    ``spare_blocks`` (default: a quarter more, at least 2) stay unused, so block ids are not
    simply 0..n-1; ``table_width`` pads every table row with ``table_fill``.
    """
    device = torch.device(device) if device is not None else runtime.device()
    gen = torch.Generator(device=device).manual_seed(seed)
    needed = [blocks_needed(n, block_size) for n in seq_lens]
    spare = max(2, sum(needed) // 4) if spare_blocks is None else spare_blocks
    num_blocks = sum(needed) + spare
    shuffled = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
    pool = BlockPool.from_free_order(num_blocks, block_size, shuffled)

    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    fill = float("nan") if poison else 0.0
    k_cache = torch.full(shape, fill, dtype=dtype, device=device)
    v_cache = torch.full(shape, fill, dtype=dtype, device=device)
    keys, values, tables = [], [], []
    for n in seq_lens:
        table = BlockTable(block_size)
        table.append_tokens(pool, n)
        k = torch.randn(n, num_kv_heads, head_dim, generator=gen, device=device).to(dtype)
        v = torch.randn(n, num_kv_heads, head_dim, generator=gen, device=device).to(dtype)
        slots = torch.tensor(table.slot_mapping(), dtype=torch.int64, device=device)
        store_kv_torch(k, v, k_cache, v_cache, slots)
        keys.append(k)
        values.append(v)
        tables.append(table)

    width = max(needed) if table_width is None else table_width
    block_tables = torch.full((len(seq_lens), width), table_fill, dtype=torch.int32)
    for i, table in enumerate(tables):
        block_tables[i, : len(table.block_ids)] = torch.tensor(table.block_ids, dtype=torch.int32)
    q = torch.randn(len(seq_lens), num_heads, head_dim, generator=gen, device=device).to(dtype)
    return PagedBatch(q, k_cache, v_cache, block_tables.to(device),
                      torch.tensor(list(seq_lens), dtype=torch.int32, device=device), keys, values, tables)


@dataclass
class PagedStep:
    """A mixed step over a paged cache: each sequence's last ``query_lens[s]`` tokens are new queries."""

    batch: PagedBatch  # the cache, tables and seq_lens (which count the new tokens too)
    q: torch.Tensor  # [num_tokens, num_heads, head_dim], packed sequence by sequence
    query_start_loc: torch.Tensor  # int32 [num_seqs + 1]
    query_lens: list[int]

    def args(self) -> tuple[torch.Tensor, ...]:
        """The positional arguments of :func:`pagedkv_edu.attention.paged_attention`."""
        b = self.batch
        return self.q, b.k_cache, b.v_cache, b.block_tables, b.seq_lens, self.query_start_loc


def random_paged_step(
    seq_lens: Sequence[int],
    query_lens: Sequence[int],
    block_size: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    seed: int = 0,
    **kwargs,
) -> PagedStep:
    """:func:`random_paged_batch` plus packed queries: sequence ``s`` brings ``query_lens[s]`` new tokens.

    ``query_lens[s] <= seq_lens[s]`` (0 allowed): a whole prompt, a chunk, the rest after a
    prefix hit, or one decode token. Extra keyword arguments go to :func:`random_paged_batch`.
    """
    if len(query_lens) != len(seq_lens) or any(not 0 <= q <= n for q, n in zip(query_lens, seq_lens)):
        raise ValueError(f"query_lens {list(query_lens)} must pair with seq_lens {list(seq_lens)}, each 0..seq_len")
    batch = random_paged_batch(seq_lens, block_size, num_heads, num_kv_heads, head_dim, dtype, device, seed, **kwargs)
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(sum(query_lens), num_heads, head_dim, generator=gen).to(dtype).to(batch.k_cache.device)
    starts = torch.tensor([0, *query_lens], dtype=torch.int32).cumsum(0, dtype=torch.int32)
    return PagedStep(batch, q, starts.to(batch.k_cache.device), list(query_lens))
