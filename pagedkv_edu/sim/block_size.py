"""Choosing a block size (chapter 9): last-block waste, table size and prefix-hit granularity per block size.

Memory-only measurements (the chapter 1-2 simulator) and arithmetic on them: the table's share
of the kernel's loads is computed from its load pattern, not timed.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.block_manager import BlockManager
from ..core.request import Request as Record
from ..core.block_table import blocks_needed
from .simulate import simulate
from ..workload import MAX_SEQ_LEN, Request, prompt_token_ids

BLOCK_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TABLE_ENTRY_BYTES = 4  # int32 block ids


@dataclass(frozen=True)
class BlockSizeRow:
    """One block size's costs on a workload."""

    block_size: int
    utilisation: float               # tokens / allocated slots, over the run
    mean_waste_per_seq: float        # empty slots in a running sequence's last block, averaged over steps
    saturated_concurrency: float     # requests held while others wait
    table_entries_per_seq: float     # at the end of each request, averaged
    table_reads_per_step: float      # distinct block-table entries a decode step needs (the whole batch, one layer and KV head)
    table_load_share: float          # table loads as the kernel issues them (one per token position per program) / all bytes loaded
    table_bytes_share: float         # table bytes if repeats hit the cache (one entry per block per program) / all bytes read
    prefix_hit_tokens: float         # tokens a request finds in the prefix cache, averaged


def sweep(requests: Sequence[Request], block_sizes: Sequence[int] = BLOCK_SIZES, *,
          kv_budget_tokens: int = 10 * MAX_SEQ_LEN, kv_bytes_per_token: int = 32 * 1024,
          programs_per_token: int = 16 * 8) -> list[BlockSizeRow]:
    """Simulate ``requests`` paged at each block size under one budget and collect the costs.

    ``kv_bytes_per_token`` (Llama-3.2-1B's 32 KiB by default) weighs the table bytes against
    the K/V bytes a decode step reads; ``programs_per_token`` is how many kernel programs read
    each token's K/V (layers x KV heads, 16 x 8 for Llama-3.2-1B), each loading the table itself.
    """
    if kv_bytes_per_token % programs_per_token:
        raise ValueError(f"kv_bytes_per_token={kv_bytes_per_token} is not a multiple of programs_per_token={programs_per_token}")
    kv_bytes_per_load = kv_bytes_per_token // programs_per_token   # one program's K and V of one token
    rows = []
    for b in block_sizes:
        result = simulate(requests, "paged", kv_budget_tokens, block_size=b)
        busy = [s for s in result.steps if s.running]
        entries = [(s.used + s.internal) // b for s in busy]   # blocks held = table entries
        reads = statistics.fmean(entries)
        kv_bytes = statistics.fmean(s.used for s in busy) * kv_bytes_per_token
        rows.append(BlockSizeRow(
            block_size=b,
            utilisation=result.utilisation,
            mean_waste_per_seq=sum(s.internal for s in busy) / sum(s.running for s in busy),
            saturated_concurrency=result.saturated_concurrency,
            table_entries_per_seq=statistics.fmean(-(-r.final_len // b) for r in requests),
            table_reads_per_step=reads,
            table_load_share=TABLE_ENTRY_BYTES / (TABLE_ENTRY_BYTES + kv_bytes_per_load),
            table_bytes_share=reads * programs_per_token * TABLE_ENTRY_BYTES
            / (reads * programs_per_token * TABLE_ENTRY_BYTES + kv_bytes),
            prefix_hit_tokens=prefix_hit_tokens(requests, b),
        ))
    return rows


def prefix_hit_tokens(requests: Sequence[Request], block_size: int, *, vocab_size: int = 49152, seed: int = 0) -> float:
    """Mean tokens each request after the first finds in the prefix cache (chapter 8's mechanism).

    The first request's prompt is computed and cached; every other request is then admitted
    alone and its hit measured. Only full blocks of the shared system prompt can hit, so the
    hit shrinks to ``floor(shared / B) * B`` tokens, and to nothing once a block is larger
    than the shared prefix.
    """
    prompts = [Record(i, prompt_token_ids(r, vocab_size, seed)) for i, r in enumerate(requests)]
    manager = BlockManager(max(blocks_needed(p.num_tokens, block_size) for p in prompts) * 2, block_size,
                           enable_prefix_caching=True)
    manager.admit(prompts[0], prompts[0].num_tokens)   # computed: its full blocks are cached
    manager.release(prompts[0])
    hits = []
    for seq in prompts[1:]:
        hits.append(manager.lookup(seq).num_tokens)   # found, without taking memory
    return statistics.fmean(hits)
