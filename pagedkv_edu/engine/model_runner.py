"""The model runner: one scheduled step in, one forward pass, logits out (chapter 6; vLLM v1's ``GPUModelRunner``).

It applies the step's block copies (swap out, copy-on-write, swap in: each reads before the
next writes), brings its persistent host block table up to date from the block ids each
scheduled sequence gained (:class:`BlockTableRows`, rows in batch order, vLLM's ``append_row``), builds the step's
:class:`~pagedkv_edu.attention.kv_cache.StepMetadata` once for every layer, and runs the model once over
the mixed batch. It allocates and decides nothing. :func:`plan_step` is the same in the small,
for a reader who drives a :class:`~pagedkv_edu.core.block_manager.BlockManager` by hand (chapter 5).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch

from ..attention.kv_cache import HostKVCache, PagedKVCache, StepMetadata, copy_blocks_between
from ..checks import is_whole
from ..core.block_manager import BlockCopies, BlockManager
from ..core.block_pool import OutOfBlocksError
from ..core.block_table import blocks_needed
from ..core.request import Request
from ..core.scheduler import ScheduledSeq, ScheduledStep
from ..model.llama import Llama


class BlockTableRows:
    """The runner's block tables in batch order: row ``i`` is the step's ``i``-th sequence (vLLM's ``InputBatch``).

    Rows are written only where the scheduler says a table changed, and move only when the
    batch changes its order; a decode step whose batch kept its order reads rows ``0..n-1`` as they are.
    """

    def __init__(self, width: int) -> None:
        self.table = torch.full((8, width), -1, dtype=torch.int32)
        self.order: list[Hashable] = []          # order[i] is the sequence whose table is row i; -1 pads a row

    def arrange(self, seq_ids: Sequence[Hashable]) -> None:
        """Put ``seq_ids`` in rows ``0..n-1``, in order (a new sequence gets an empty row); the rest keep theirs after."""
        seq_ids = list(seq_ids)
        if self.order[:len(seq_ids)] == seq_ids:
            return
        index = {seq_id: row for row, seq_id in enumerate(self.order)}
        scheduled = set(seq_ids)
        order = seq_ids + [seq_id for seq_id in self.order if seq_id not in scheduled]
        size = self.table.shape[0]
        while size < len(order):   # more live sequences than rows: double the table
            size *= 2
        moved = torch.full((size, self.table.shape[1]), -1, dtype=torch.int32)
        kept = [(row, index[seq_id]) for row, seq_id in enumerate(order) if seq_id in index]
        if kept:
            new, old = zip(*kept)
            moved[list(new)] = self.table[list(old)]
        self.table, self.order = moved, order

    def append_row(self, row: int, s: ScheduledSeq) -> None:
        """Write the ids ``s`` brings at their index in ``row`` (a whole table at admission, swap-in or fork)."""
        if s.new_block_ids:
            end = s.first_new_block + len(s.new_block_ids)
            self.table[row, s.first_new_block:end] = torch.tensor(s.new_block_ids, dtype=torch.int32)

    def ids(self, seq_id: Hashable) -> list[int]:
        """A sequence's row as a list, up to its padding (for tests and pictures)."""
        row = self.table[self.order.index(seq_id)].tolist()
        return row[:row.index(-1)] if -1 in row else row

    def release(self, seq_id: Hashable) -> None:
        """The sequence left the running batch (finished or preempted): the rows after it move up one."""
        if seq_id not in self.order:
            return
        row, n = self.order.index(seq_id), len(self.order)
        self.table[row:n - 1] = self.table[row + 1:n].clone()
        self.table[n - 1] = -1
        del self.order[row]


class ModelRunner:
    """Executes scheduled steps of one model over one :class:`~pagedkv_edu.attention.kv_cache.PagedKVCache`."""

    def __init__(self, model: Llama, kv_cache: PagedKVCache, max_seq_len: int,
                 host_cache: HostKVCache | None = None) -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.host_cache = host_cache     # where swapped-out blocks live (preemption by swap)
        self.device = model.device
        self.tables = BlockTableRows(blocks_needed(max_seq_len, kv_cache.block_size))

    @classmethod
    def for_model(cls, model: Llama, config: Any, memory: Any) -> "ModelRunner":
        """A runner with a K/V cache of ``memory``'s blocks (and host blocks for its swap space), per ``config``."""
        cfg, num_blocks, size = model.config, memory.pool.num_blocks, memory.block_size
        cache = PagedKVCache.for_model(cfg, num_blocks, size, dtype=model.dtype, device=model.device,
                                       backend=config.backend, check=False)
        swap = getattr(memory, "swap", None)
        host = None if swap is None else HostKVCache(cfg.num_layers, swap.pool.num_blocks, size, cfg.num_kv_heads,
                                                     cfg.head_dim, model.dtype)
        return cls(model, cache, config.max_seq_len, host)

    def release(self, seq_id: Hashable) -> None:
        self.tables.release(seq_id)

    def prepare(self, step: ScheduledStep) -> StepMetadata:
        """The step's metadata, from the persistent table's first rows (brought up to date first)."""
        seq_ids = [s.seq.seq_id for s in step.scheduled]
        self.tables.arrange(seq_ids)
        for row, s in enumerate(step.scheduled):
            self.tables.append_row(row, s)
        return StepMetadata.build(seq_ids, [s.seq_len for s in step.scheduled], [s.num_new_tokens for s in step.scheduled],
                                  self.device, self.tables.table[:len(seq_ids)], self.kv_cache.block_size)

    def execute(self, step: ScheduledStep, input_ids: Sequence[int]) -> torch.Tensor:
        """Block copies, then one forward pass; the logits of every scheduled sequence's last new token.

        ``input_ids`` are the step's new tokens, sequence after sequence, in ``step.scheduled`` order.
        """
        with torch.profiler.record_function(f"pagedkv.step.{step.kind}"):   # a label for serve-bench's profile
            self.apply_copies(step.copies)
            meta = self.prepare(step)
            tokens = torch.tensor(input_ids, dtype=torch.int64).to(self.device, non_blocking=True)
            return self.model(tokens, meta, self.kv_cache)

    def apply_copies(self, copies: BlockCopies) -> None:
        """Swap out, copy on write, swap in: every source is read before a later copy can overwrite it."""
        cache = self.kv_cache
        if copies.swap_out or copies.swap_in:
            assert self.host_cache is not None, "a swap needs the runner's host cache"
            device, host = cache.k_caches + cache.v_caches, self.host_cache.k_caches + self.host_cache.v_caches
        if copies.swap_out:
            copy_blocks_between(device, host, copies.swap_out)
        if copies.copy:
            cache.copy_blocks(copies.copy)   # the shipped kernels, never a reader's attention function
        if copies.swap_in:
            copy_blocks_between(host, device, copies.swap_in)


def plan_step(manager: BlockManager, seqs: Sequence[Request], query_lens: Sequence[int],
              device: torch.device | str = "cpu") -> StepMetadata:
    """Give each sequence its next ``query_lens`` tokens in ``manager`` (admitting new ones) and describe the step.

    Chapter 5's way to drive a :class:`~pagedkv_edu.attention.kv_cache.PagedKVCache` by hand, playing
    the scheduler: it advances each record's ``num_computed_tokens``. Checks that every sequence
    fits before allocating anything: a refused step leaves the pool and the records as they were.
    """
    if len(seqs) != len(query_lens) or not seqs:
        raise ValueError(f"need one query length per sequence and at least one sequence; got {len(seqs)} "
                         f"sequences and {len(query_lens)} lengths")
    if len({id(s) for s in seqs}) != len(seqs):
        raise ValueError(f"a sequence appears twice in one step: {[s.seq_id for s in seqs]}")
    need = 0
    for seq, n in zip(seqs, query_lens):
        if not is_whole(n) or n < 1:
            raise ValueError(f"sequence {seq.seq_id!r}: a step must bring at least one token, got {n!r}")
        total = seq.num_computed_tokens + n
        if total > seq.num_tokens:
            raise ValueError(f"sequence {seq.seq_id!r} has {seq.num_tokens} tokens; {seq.num_computed_tokens} are "
                             f"computed, so it cannot bring {n}: append its next token first")
        if not manager.fits(total):
            raise ValueError(f"sequence {seq.seq_id!r}: {total} tokens can never be held (max_seq_len="
                             f"{manager.max_seq_len}, {manager.pool.num_blocks} blocks)")
        need += manager.blocks_to_grow(seq, n) if seq in manager else blocks_needed(total, manager.block_size)
    if need > manager.pool.num_free:
        raise OutOfBlocksError(f"this step needs {need} new blocks but the pool has {manager.pool.num_free} of "
                               f"{manager.pool.num_blocks} free")
    for seq, n in zip(seqs, query_lens):
        granted = manager.grow(seq, n) if seq in manager else manager.admit(seq, n)
        if granted is None:     # the watermark: counted above only when nothing else holds memory
            raise OutOfBlocksError(f"sequence {seq.seq_id!r}: admitting {n} tokens would break the manager's "
                                   f"watermark of {manager.watermark_blocks} free blocks")
        seq.num_computed_tokens += n
    return StepMetadata.build([s.seq_id for s in seqs], [s.num_computed_tokens for s in seqs], query_lens, device,
                              [manager.block_ids(s) for s in seqs], manager.block_size)
