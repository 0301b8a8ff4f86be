"""One picture of the KV memory's state: blocks, tables, reference counts, cached blocks, and a step's queues.

Chapter 2's explorer, chapter 6's replay and the book's static pictures all draw a
:class:`Snapshot`, taken by :func:`snapshot` from a block manager (or a pool and its tables).
A contiguous reservation is simply a block of ``max_seq_len`` slots, drawn with its empty tail.
Plain immutable data, so the renderers (``viz.render``) are pure functions and tests read state, not pixels.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..core.block_manager import MemoryUsage, memory_usage
from ..core.block_pool import BlockPool
from ..core.block_table import BlockTable
from .language import Message, tr


@dataclass(frozen=True)
class TableView:
    """One sequence's block table: its token count and physical blocks."""

    seq_id: Hashable
    num_tokens: int
    block_ids: tuple[int, ...]
    block_size: int

    @property
    def fills(self) -> tuple[int, ...]:
        """Filled slots of each block: full blocks, then the (maybe partial) last one."""
        return tuple(min(self.block_size, self.num_tokens - i * self.block_size) for i in range(len(self.block_ids)))

    @property
    def rows(self) -> tuple[tuple[int, int, int], ...]:
        """(logical, physical, filled) rows, as chapter 2 prints them."""
        return tuple((i, b, f) for i, (b, f) in enumerate(zip(self.block_ids, self.fills)))


@dataclass(frozen=True)
class BlockView:
    """One physical block as drawn; ``state`` is free, owned (one table), shared (more) or other (held elsewhere)."""

    block_id: int
    state: str
    owners: tuple[Hashable, ...]
    fill: int
    ref_count: int
    cached: bool


@dataclass(frozen=True)
class Snapshot:
    """The memory after a click (explorer) or an engine step (trace): what every picture draws."""

    block_size: int
    ref_counts: tuple[int, ...]               # per physical block; 0 = free
    free_order: tuple[int, ...]               # the pool's free queue, next to be allocated first
    tables: tuple[TableView, ...]             # live sequences, in the order they were added
    cached: frozenset[int] = frozenset()      # blocks the prefix cache can find (in use or free)
    message: str = ""                         # the explorer's last answer to a click
    is_error: bool = False
    events: tuple[str, ...] = ()              # the explorer's log
    # An engine step (the trace's frames); empty for the explorer.
    step: int | None = None
    running: tuple[Hashable, ...] = ()        # the batch, oldest admission first
    waiting: tuple[Hashable, ...] = ()        # queued, never run
    preempted: tuple[Hashable, ...] = ()      # queued again after a preemption
    admitted: tuple[Hashable, ...] = ()       # prefilled in this step
    preempted_now: tuple[Hashable, ...] = ()  # preempted in this step
    finished: tuple[Hashable, ...] = ()       # finished in this step
    copies: tuple[tuple[int, int], ...] = ()  # copy-on-write (source, destination) made in this step
    num_output: tuple[tuple[Hashable, int], ...] = ()   # tokens generated so far, every sequence seen
    prefill_tokens: int = 0                   # prompt tokens computed in this step (chunks, recomputation)
    decode_tokens: int = 0                    # sampled tokens fed back in this step
    token_budget: int | None = None           # the step's cap (max_num_batched_tokens); None: no cap

    @cached_property
    def blocks(self) -> tuple[BlockView, ...]:
        owners: list[list[Hashable]] = [[] for _ in self.ref_counts]
        fills = [0] * len(self.ref_counts)
        for table in self.tables:
            for block, fill in zip(table.block_ids, table.fills):
                owners[block].append(table.seq_id)
                fills[block] = max(fills[block], fill)
        views = []
        for b, refs in enumerate(self.ref_counts):
            state = ("free" if refs == 0 else "other" if not owners[b]
                     else "shared" if refs > 1 or len(owners[b]) > 1 else "owned")
            views.append(BlockView(b, state, tuple(owners[b]), fills[b], refs, b in self.cached))
        return tuple(views)

    def block(self, block_id: int) -> BlockView:
        return self.blocks[block_id]

    def table(self, seq_id: Hashable) -> TableView | None:
        """``seq_id``'s table, None when it holds no blocks (waiting, finished, or not arrived)."""
        return next((t for t in self.tables if t.seq_id == seq_id), None)

    def outputs(self, seq_id: Hashable) -> int:
        """Tokens ``seq_id`` had generated after this step (0 if it had not started)."""
        return dict(self.num_output).get(seq_id, 0)

    @property
    def num_blocks(self) -> int:
        return len(self.ref_counts)

    @property
    def num_free(self) -> int:
        return len(self.free_order)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def num_shared(self) -> int:
        """Blocks with more than one reference: prefix sharing or forked samples."""
        return sum(1 for r in self.ref_counts if r > 1)

    @property
    def num_other(self) -> int:
        """Blocks in use by sequences outside this picture."""
        return sum(1 for b in self.blocks if b.state == "other")

    @cached_property
    def usage(self) -> MemoryUsage:
        """What the tables hold, by the memory's one definition (:func:`~pagedkv_edu.core.block_manager.memory_usage`)."""
        return memory_usage(self.block_size, self.num_blocks * self.block_size,
                            ((t.block_ids, t.num_tokens) for t in self.tables))

    @property
    def num_tokens(self) -> int:
        """Tokens stored in the tables' blocks; a shared block's tokens count once."""
        return self.usage.stored_tokens

    @property
    def allocated_slots(self) -> int:
        """Slots of the blocks the tables hold (blocks held outside the picture are not counted)."""
        return self.usage.held_slots

    @property
    def waste_slots(self) -> int:
        """Allocated but empty slots: the tails of last blocks (a contiguous reservation's whole tail)."""
        return self.usage.waste_slots

    @property
    def waste_fraction(self) -> float:
        """Empty share of the allocated slots: one minus the utilisation."""
        return 1.0 - self.usage.utilisation

    def summary(self) -> Message:
        """The counters as one line of text (the static picture's text/plain), in the reader's language when shown."""
        counts = dict(used=self.num_used, total=self.num_blocks, free=self.num_free, tokens=self.num_tokens,
                      n=len(self.tables), waste=self.waste_slots, percent=100 * self.waste_fraction)
        one = counts["n"] == 1
        if self.num_other and one:
            return tr("{used} of {total} blocks used, {free} free; {tokens} tokens in {n} request; "
                      "waste {waste} slots ({percent:.1f}%); {other} held by other requests",
                      other=self.num_other, **counts)
        if self.num_other:
            return tr("{used} of {total} blocks used, {free} free; {tokens} tokens in {n} requests; "
                      "waste {waste} slots ({percent:.1f}%); {other} held by other requests",
                      other=self.num_other, **counts)
        if one:
            return tr("{used} of {total} blocks used, {free} free; {tokens} tokens in {n} request; "
                      "waste {waste} slots ({percent:.1f}%)", **counts)
        return tr("{used} of {total} blocks used, {free} free; {tokens} tokens in {n} requests; "
                  "waste {waste} slots ({percent:.1f}%)", **counts)


def snapshot(source: Any, tables: Mapping[Hashable, BlockTable] | None = None, **state: Any) -> Snapshot:
    """Take the picture of a block manager, or of a pool and the tables that point into it.

    ``state`` fills the rest (the explorer's ``message``, ``is_error``, ``events``; an engine
    step's queues and budget). A pool on its own shows its busy blocks as ``other``: it counts
    references but does not know who holds them.
    """
    cache = None
    if isinstance(source, BlockPool):
        pool = source
        views = [TableView(s, t.num_tokens, tuple(t.block_ids), t.block_size) for s, t in (tables or {}).items()]
    elif isinstance(getattr(source, "pool", None), BlockPool) and hasattr(source, "sequences"):
        if tables is not None:
            raise ValueError("pass tables only with a BlockPool; a block manager brings its own")
        pool, cache = source.pool, getattr(source, "prefix_cache", None)
        views = [TableView(seq.seq_id, seq.num_computed_tokens, tuple(source.block_ids(seq)), pool.block_size)
                 for seq in source.sequences]
    else:
        raise TypeError(f"expected a BlockManager or BlockPool, got {type(source).__name__}")
    for view in views:
        if view.block_size != pool.block_size:
            raise ValueError(f"table {view.seq_id!r} has block_size {view.block_size}, the pool {pool.block_size}")
        outside = [b for b in view.block_ids if not 0 <= b < pool.num_blocks]
        if outside:
            raise IndexError(f"table {view.seq_id!r} points at block {outside[0]}, outside a pool of {pool.num_blocks}")
    return Snapshot(
        block_size=pool.block_size,
        ref_counts=tuple(pool.ref_counts),
        free_order=tuple(pool.free_ids()),
        tables=tuple(views),
        cached=frozenset(b for b in range(pool.num_blocks) if b in cache) if cache is not None else frozenset(),
        **state,
    )


__all__ = ["BlockView", "Snapshot", "TableView", "snapshot"]
