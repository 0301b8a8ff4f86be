"""Choosing a block size (chapter 8): what each block size costs, measured on one workload.

The block size trades four things against each other:

* **last-block waste**: each sequence wastes on average about half a block at its tail, so
  bigger blocks fit fewer sequences in the same memory;
* **block-table size**: a sequence of ``L`` tokens needs ``ceil(L / B)`` entries, and the
  decode kernel reads every entry of every sequence at every step;
* **prefix-hit granularity**: only *full* blocks are shared by prefix caching, so a shared
  prefix of ``P`` tokens can reuse at most ``floor(P / B) * B`` of them;
* **kernel time**: decode attention is limited by reading K and V, which costs the same
  bytes at any block size; the table lookups are a vanishing share of those bytes, so once a
  block is large enough for the kernel to read it in full-width loads, larger blocks stop
  helping (vLLM issue #6868, and the paper's finding that 16-128 works best).

Everything here is a memory-only measurement (the chapter-1/2 simulator), except the kernel
time, which :func:`cpu_reference_times` measures for the PyTorch reference on this machine
and chapter 8 takes from committed GPU records when they exist.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from .attention import paged_decode_attention
from .attention.batch import random_paged_batch
from .simulate import simulate
from .workload import MAX_SEQ_LEN, SYSTEM_PROMPT_TOKENS, Request

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
    table_reads_per_step: float      # block-table entries a decode step reads (the whole batch)
    table_bytes_share: float         # table bytes read / (table + K/V bytes read) per decode step
    shared_prefix_reusable: int      # tokens of the shared system prompt in full blocks

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def sweep(requests: Sequence[Request], block_sizes: Sequence[int] = BLOCK_SIZES, *,
          kv_budget_tokens: int = 10 * MAX_SEQ_LEN, kv_bytes_per_token: int = 32 * 1024,
          shared_prefix: int = SYSTEM_PROMPT_TOKENS) -> list[BlockSizeRow]:
    """Simulate ``requests`` paged at each block size under one budget and collect the costs.

    ``kv_bytes_per_token`` (Llama-3.2-1B's 32 KiB by default) weighs the table bytes against
    the K/V bytes a decode step reads.
    """
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
            table_bytes_share=reads * TABLE_ENTRY_BYTES / (reads * TABLE_ENTRY_BYTES + kv_bytes),
            shared_prefix_reusable=(shared_prefix // b) * b,
        ))
    return rows


def cpu_reference_times(block_sizes: Sequence[int] = BLOCK_SIZES, *, batch: int = 8, context: int = 512,
                        num_heads: int = 8, num_kv_heads: int = 2, head_dim: int = 64,
                        repeats: int = 5) -> dict[int, float]:
    """Median milliseconds of the PyTorch reference decode (gather, then attention) per block size.

    This is the CPU reference, not the GPU kernel: it shows that gathering through a table
    costs about the same at every block size, and nothing about a GPU's memory system.
    """
    times = {}
    for b in block_sizes:
        pb = random_paged_batch([context] * batch, b, num_heads, num_kv_heads, head_dim, torch.float32,
                                device="cpu", seed=b, poison=False)
        args = (pb.q, pb.k_cache, pb.v_cache, pb.block_tables, pb.seq_lens)
        paged_decode_attention(*args, backend="torch")   # warm up
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            paged_decode_attention(*args, backend="torch")
            samples.append((time.perf_counter() - start) * 1e3)
        times[b] = statistics.median(samples)
    return times
