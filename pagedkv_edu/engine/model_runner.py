"""The model runner: one scheduled step in, one forward pass, logits out (chapter 6; vLLM v1's ``GPUModelRunner``).

It applies the step's block copies (swap out, copy-on-write, swap in: each reads before the
next writes), brings its persistent host block table up to date from the block ids each
scheduled sequence gained (:class:`BlockTableRows`, vLLM's ``append_row``), builds the step's
:class:`~pagedkv_edu.kv_cache.StepMetadata` once for every layer, and runs the model once over
the mixed batch. It allocates and decides nothing. :func:`plan_step` is the same in the small,
for a reader who drives a :class:`~pagedkv_edu.block_manager.BlockManager` by hand (chapter 5).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from ..block_manager import BlockManager
from ..block_pool import OutOfBlocksError
from ..block_table import blocks_needed
from ..kv_cache import PagedKVCache, StepMetadata
from ..model.llama import Llama
from ..scheduler import ScheduledSeq, ScheduledStep
from ..swap import HostKVCache, copy_blocks_between


class BlockTableRows:
    """The runner's block tables: one host row per running sequence, written only where the scheduler says it changed."""

    def __init__(self, width: int) -> None:
        self.table = torch.full((8, width), -1, dtype=torch.int32)
        self.rows: dict[Hashable, int] = {}
        self.lengths: dict[Hashable, int] = {}

    def append_row(self, s: ScheduledSeq) -> int:
        """Write the ids ``s`` brings at their index (a fresh sequence gets a free row); its row."""
        seq_id = s.seq.seq_id
        row = self.rows.get(seq_id)
        if row is None:
            used = set(self.rows.values())
            row = next((r for r in range(self.table.shape[0]) if r not in used), None)
            if row is None:   # more running sequences than rows: double the table
                row = self.table.shape[0]
                self.table = torch.cat([self.table, torch.full_like(self.table, -1)])
            self.rows[seq_id] = row
        if s.new_block_ids:
            end = s.first_new_block + len(s.new_block_ids)
            self.table[row, s.first_new_block:end] = torch.tensor(s.new_block_ids, dtype=torch.int32)
            self.lengths[seq_id] = end
        return row

    def ids(self, seq_id: Hashable) -> list[int]:
        """A sequence's row as a list (for tests and pictures)."""
        return self.table[self.rows[seq_id], :self.lengths.get(seq_id, 0)].tolist()

    def release(self, seq_id: Hashable) -> None:
        """The sequence left the running batch (finished or preempted): free its row."""
        row = self.rows.pop(seq_id, None)
        if row is not None:
            self.table[row].fill_(-1)
            self.lengths.pop(seq_id, None)


class ModelRunner:
    """Executes scheduled steps of one model over one :class:`~pagedkv_edu.kv_cache.PagedKVCache`."""

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
        """The step's metadata, from the persistent table's rows (brought up to date first)."""
        rows = torch.tensor([self.tables.append_row(s) for s in step.scheduled])
        return StepMetadata.build([s.seq.seq_id for s in step.scheduled], [s.seq_len for s in step.scheduled],
                                  [s.num_new_tokens for s in step.scheduled], self.device, self.tables.table[rows],
                                  self.kv_cache.block_size)

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

    Chapter 5's way to drive a :class:`~pagedkv_edu.kv_cache.PagedKVCache` by hand. Checks that
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
