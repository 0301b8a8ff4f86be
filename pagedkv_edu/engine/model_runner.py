"""The model runner: one scheduled step in, one forward pass, logits out.

The scheduler decides *what* runs (:class:`~pagedkv_edu.scheduler.ScheduledStep`); the runner
makes it happen on the device, as vLLM v1's ``GPUModelRunner`` does:

1. apply the step's block copies to the K/V tensors: a swapped-out victim's blocks to host
   memory, copy-on-write, swapped-in blocks back (in that order: each reads before the next writes);
2. build the step's :class:`~pagedkv_edu.model.kv_store.StepMetadata` once, for all layers:
   every new token's position and cache slot, each sequence's context length, the
   cumulative query lengths, and the block tables. The block tables live in one
   **persistent** host tensor, a row per running sequence, updated in place (only the entries
   that changed are written: a new block, a copied last block), so a decode step does not
   rebuild tables of thousands of entries. The slot mapping is computed from that tensor;
3. run the model **once** over the whole mixed batch, decodes and prefill chunks together,
   and return the logits of each sequence's last new token.

Nothing here allocates KV memory or decides anything; nothing in it synchronises with the
device per layer (the metadata is built on the host, copied once, and every layer reuses it).

:func:`plan_step` is the same in the small, for a reader who drives a
:class:`~pagedkv_edu.block_manager.BlockManager` by hand (chapter 5).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from ..block_manager import BlockManager
from ..block_pool import OutOfBlocksError
from ..block_table import blocks_needed
from ..model.kv_store import ContiguousKVStore, PagedKVStore, StepMetadata
from ..model.llama import Llama
from ..scheduler import ScheduledStep
from ..swap import HostKVCache, copy_blocks_between


class ModelRunner:
    """Executes scheduled steps of one model over one KV store (paged or contiguous)."""

    def __init__(self, model: Llama, store: PagedKVStore | ContiguousKVStore, max_seq_len: int,
                 host_cache: HostKVCache | None = None) -> None:
        self.model = model
        self.store = store
        self.host_cache = host_cache     # where swapped-out blocks live (preemption by swap)
        self.device = model.device
        self.paged = isinstance(store, PagedKVStore)
        width = blocks_needed(max_seq_len, store.block_size) if self.paged else 1
        self.block_table = torch.full((8, width), -1, dtype=torch.int32)   # host, persistent: a row per sequence
        self._rows: dict[Hashable, int] = {}
        self._written: dict[Hashable, tuple[int, int]] = {}   # (entries written, last block id) of each row

    # --- the persistent block table --------------------------------------------------------
    def _row(self, seq_id: Hashable, block_ids: list[int]) -> int:
        """The sequence's row, brought up to date with its table: only new or replaced entries are written."""
        row = self._rows.get(seq_id)
        if row is None:
            used = set(self._rows.values())
            row = next((r for r in range(self.block_table.shape[0]) if r not in used), None)
            if row is None:   # more running sequences than rows: double the table
                row = self.block_table.shape[0]
                self.block_table = torch.cat([self.block_table, torch.full_like(self.block_table, -1)])
            self._rows[seq_id] = row
            done = 0
        else:
            done, last = self._written[seq_id]
            if done and (done > len(block_ids) or block_ids[done - 1] != last):
                done -= 1       # copy-on-write replaced the last block
        if done < len(block_ids):
            self.block_table[row, done:len(block_ids)] = torch.tensor(block_ids[done:], dtype=torch.int32)
        self._written[seq_id] = (len(block_ids), block_ids[-1] if block_ids else -1)
        return row

    def release(self, seq_id: Hashable) -> None:
        """The sequence left the running batch (finished or preempted): free its row."""
        row = self._rows.pop(seq_id, None)
        if row is not None:
            self.block_table[row].fill_(-1)
            del self._written[seq_id]

    # --- one step ----------------------------------------------------------------------------
    def prepare(self, step: ScheduledStep) -> StepMetadata:
        """The step's metadata, built once on the host and copied to the device in one go per tensor."""
        query_lens = [s.num_new_tokens for s in step.scheduled]
        seq_lens = [s.seq_len for s in step.scheduled]
        q = torch.tensor(query_lens, dtype=torch.int64)
        qsl = torch.zeros(len(query_lens) + 1, dtype=torch.int64)
        torch.cumsum(q, 0, out=qsl[1:])
        num_tokens = int(qsl[-1])
        seq_of_token = torch.repeat_interleave(torch.arange(len(query_lens)), q)
        first_pos = torch.tensor([s.num_computed_tokens for s in step.scheduled], dtype=torch.int64)
        positions = torch.arange(num_tokens) - qsl[:-1][seq_of_token] + first_pos[seq_of_token]
        fields: dict[str, object] = {}
        if self.paged:
            size = self.store.block_size
            rows = torch.tensor([self._row(s.seq.seq_id, s.block_ids) for s in step.scheduled])
            width = blocks_needed(max(seq_lens), size)
            tables = self.block_table[rows, :width]
            slots = tables[seq_of_token, positions // size].to(torch.int64) * size + positions % size
            fields["block_tables"] = tables.to(self.device, non_blocking=True)
        else:
            starts = [s.kv_start for s in step.scheduled]
            slots = torch.tensor(starts, dtype=torch.int64)[seq_of_token] + positions
            fields["kv_starts"] = tuple(starts)
        return StepMetadata(
            tuple(s.seq.seq_id for s in step.scheduled), tuple(query_lens), tuple(seq_lens),
            positions.to(self.device, non_blocking=True), (qsl[1:] - 1).to(self.device, non_blocking=True),
            slot_mapping=slots.to(self.device, non_blocking=True),
            seq_lens_tensor=torch.tensor(seq_lens, dtype=torch.int32).to(self.device, non_blocking=True),
            query_start_loc=qsl.to(torch.int32).to(self.device, non_blocking=True), **fields)

    def execute(self, step: ScheduledStep, input_ids: Sequence[int]) -> torch.Tensor:
        """Copy-on-write, then one forward pass; the logits of every scheduled sequence's last new token.

        ``input_ids`` are the step's new tokens, sequence after sequence, in ``step.scheduled`` order.
        """
        with torch.profiler.record_function(f"pagedkv.step.{step_kind(step)}"):   # a label for serve-bench's profile
            self.apply_copies(step)
            meta = self.prepare(step)
            tokens = torch.tensor(input_ids, dtype=torch.int64).to(self.device, non_blocking=True)
            return self.model(tokens, meta, self.store)


    def apply_copies(self, step: ScheduledStep) -> None:
        """Swap out, copy on write, swap in: every source is read before a later copy can overwrite it."""
        if not (step.swap_out or step.copies or step.swap_in):
            return
        assert isinstance(self.store, PagedKVStore), "only paged memory copies blocks"
        cache = self.store.cache
        if step.swap_out or step.swap_in:
            assert self.host_cache is not None, "a swap needs the runner's host cache"
            device, host = cache.k_caches + cache.v_caches, self.host_cache.k_caches + self.host_cache.v_caches
        if step.swap_out:
            copy_blocks_between(device, host, step.swap_out)
        if step.copies:
            cache.copy_blocks(step.copies, self.store.kernel_backend)   # never a reader's attention function
        if step.swap_in:
            copy_blocks_between(host, device, step.swap_in)


def step_kind(step: ScheduledStep) -> str:
    """"decode" (every sequence brings one token), "prefill" (none does) or "mixed"."""
    ones = sum(s.num_new_tokens == 1 and not s.is_prefill for s in step.scheduled)
    return "decode" if ones == len(step.scheduled) else "prefill" if ones == 0 else "mixed"


def plan_step(manager: BlockManager, seq_ids: Sequence[Hashable], query_lens: Sequence[int],
              device: torch.device | str = "cpu") -> StepMetadata:
    """Grow each sequence by its new tokens in ``manager`` (adding new ids) and describe the step.

    Chapter 5's way to drive a :class:`~pagedkv_edu.model.kv_store.PagedKVStore` by hand: the
    manager owns the blocks, the store the tensors. Checks that every sequence fits before
    allocating anything, so a refused step leaves the pool and the tables as they were.
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
        need += manager.blocks_to_append(sid, n) if table else blocks_needed(n, manager.block_size)
    if need > manager.pool.num_free:
        raise OutOfBlocksError(f"this step needs {need} new blocks but the pool has {manager.pool.num_free} of "
                         f"{manager.pool.num_blocks} free")
    for sid, n in zip(seq_ids, query_lens):
        if sid in manager.tables:
            manager.append_tokens(sid, n)
        else:
            manager.add_sequence(sid, n)
    tables = [manager.table(sid) for sid in seq_ids]
    return StepMetadata.build(seq_ids, [t.num_tokens for t in tables], query_lens, torch.device(device), tables)
