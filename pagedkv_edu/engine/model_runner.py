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

import torch

from ..core.block_manager import BlockManager
from ..core.block_pool import OutOfBlocksError
from ..core.block_table import blocks_needed
from ..attention.kv_cache import PagedKVCache, StepMetadata
from ..model.llama import Llama
from ..core.scheduler import ScheduledSeq, ScheduledStep
from ..attention.kv_cache import HostKVCache, copy_blocks_between


class BlockTableRows:
    """The runner's block tables in batch order: row ``i`` is the step's ``i``-th sequence (vLLM's ``InputBatch``).

    Rows are written only where the scheduler says a table changed, and move only when the
    batch changes its order; a decode step whose batch kept its order reads rows ``0..n-1`` as they are.
    """

    def __init__(self, width: int) -> None:
        self.table = torch.full((8, width), -1, dtype=torch.int32)
        self.order: list[Hashable] = []          # order[i] is the sequence whose table is row i
        self.lengths: dict[Hashable, int] = {}   # the ids written in each row

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
            self.lengths[s.seq.seq_id] = end

    def ids(self, seq_id: Hashable) -> list[int]:
        """A sequence's row as a list (for tests and pictures)."""
        return self.table[self.order.index(seq_id), :self.lengths.get(seq_id, 0)].tolist()

    def release(self, seq_id: Hashable) -> None:
        """The sequence left the running batch (finished or preempted): the rows after it move up one."""
        if seq_id not in self.order:
            return
        row, n = self.order.index(seq_id), len(self.order)
        self.table[row:n - 1] = self.table[row + 1:n].clone()
        self.table[n - 1] = -1
        del self.order[row]
        self.lengths.pop(seq_id, None)


class ModelRunner:
    """Executes scheduled steps of one model over one :class:`~pagedkv_edu.attention.kv_cache.PagedKVCache`."""

    def __init__(self, model: Llama, kv_cache: PagedKVCache, max_seq_len: int,
                 host_cache: HostKVCache | None = None) -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.host_cache = host_cache     # where swapped-out blocks live (preemption by swap)
        self.device = model.device
        self.tables = BlockTableRows(blocks_needed(max_seq_len, kv_cache.block_size))

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
        with torch.profiler.record_function(f"pagedkv.step.{step_kind(step)}"):   # a label for serve-bench's profile
            self.apply_copies(step)
            meta = self.prepare(step)
            tokens = torch.tensor(input_ids, dtype=torch.int64).to(self.device, non_blocking=True)
            return self.model(tokens, meta, self.kv_cache)

    def apply_copies(self, step: ScheduledStep) -> None:
        """Swap out, copy on write, swap in: every source is read before a later copy can overwrite it."""
        cache = self.kv_cache
        if step.swap_out or step.swap_in:
            assert self.host_cache is not None, "a swap needs the runner's host cache"
            device, host = cache.k_caches + cache.v_caches, self.host_cache.k_caches + self.host_cache.v_caches
        if step.swap_out:
            copy_blocks_between(device, host, step.swap_out)
        if step.copies:
            cache.copy_blocks(step.copies)   # the shipped kernels, never a reader's attention function
        if step.swap_in:
            copy_blocks_between(host, device, step.swap_in)


def step_kind(step: ScheduledStep) -> str:
    """"decode" (every sequence brings one token), "prefill" (none does) or "mixed"."""
    ones = sum(s.num_new_tokens == 1 and not s.is_prefill for s in step.scheduled)
    return "decode" if ones == len(step.scheduled) else "prefill" if ones == 0 else "mixed"


def plan_step(manager: BlockManager, seq_ids: Sequence[Hashable], query_lens: Sequence[int],
              device: torch.device | str = "cpu") -> StepMetadata:
    """Grow each sequence by its new tokens in ``manager`` (admitting new ones) and describe the step.

    Chapter 5's way to drive a :class:`~pagedkv_edu.attention.kv_cache.PagedKVCache` by hand. Checks that
    every sequence fits before allocating anything: a refused step leaves the pool as it was.
    """
    if len(seq_ids) != len(query_lens) or not seq_ids:
        raise ValueError(f"need one query length per sequence and at least one sequence; got {len(seq_ids)} "
                         f"sequences and {len(query_lens)} lengths")
    if len(set(seq_ids)) != len(seq_ids):
        raise ValueError(f"a sequence appears twice in one step: {list(seq_ids)}")
    need = 0
    for sid, n in zip(seq_ids, query_lens):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"sequence {sid!r}: a step must bring at least one token, got {n!r}")
        table = manager.tables.get(sid)
        total = n + (table.num_tokens if table else 0)
        if manager.max_seq_len is not None and total > manager.max_seq_len:
            raise ValueError(f"sequence {sid!r}: {total} tokens exceed max_seq_len={manager.max_seq_len}")
        need += manager.blocks_to_grow(sid, n) if table else blocks_needed(n, manager.block_size)
    if need > manager.pool.num_free:
        raise OutOfBlocksError(f"this step needs {need} new blocks but the pool has {manager.pool.num_free} of "
                               f"{manager.pool.num_blocks} free")
    for sid, n in zip(seq_ids, query_lens):
        if sid in manager.tables:
            manager.grow(sid, n)
        else:
            manager.admit(sid, n)
    tables = [manager.table(sid) for sid in seq_ids]
    return StepMetadata.build(seq_ids, [t.num_tokens for t in tables], query_lens, device,
                              [t.block_ids for t in tables], manager.block_size)
