"""Reference solution to chapter 2's block manager: the file a reader saves as ``my_engine/block_manager.py``.

The decisions only: :class:`~pagedkv_edu.core.block_manager.ManagerBase` keeps ``self.held`` (each
sequence's record -> its block ids) over ``self.pool``, and answers every question. Each decision does
all of its work or returns None having changed nothing; the sequence's token count is its record's
``num_computed_tokens``, read here and advanced by the scheduler.
"""

from __future__ import annotations

from typing import Any

from pagedkv_edu.core.block_manager import ManagerBase
from pagedkv_edu.core.block_table import blocks_needed
from pagedkv_edu.core.prefix_cache import NO_HIT, PrefixHit


class BlockManager(ManagerBase):
    """Blocks from the front of the pool's free queue, only when the last block is full; released last block first."""

    def admit(self, seq: Any, num_new_tokens: int, hit: PrefixHit = NO_HIT) -> list[int] | None:
        """The first blocks of a sequence that holds none: the cached prefix's, then fresh ones; or None."""
        self.check_new_id(seq)
        start = max(hit.num_tokens, seq.num_computed_tokens)
        end = start + self.check_new(seq, num_new_tokens, start)
        fresh = blocks_needed(end, self.block_size) - len(hit.block_ids)
        revived = sum(1 for block in hit.block_ids if self.pool.ref_counts[block] == 0)   # cached, but free
        watermark = self.watermark_blocks if self.held else 0      # room for the running to grow
        if fresh + revived + watermark > self.pool.num_free:
            return None                                            # nothing taken, nothing changed
        for block in hit.block_ids:                                # first: allocating cannot evict them now
            self.pool.touch(block)
        self.held[seq] = list(hit.block_ids) + self.pool.allocate(fresh)
        self.register(seq, self.held[seq], start, end)
        return list(self.held[seq])

    def grow(self, seq: Any, num_new_tokens: int) -> list[int] | None:
        """Room for ``num_new_tokens`` more tokens: the blocks the table gained (often none), or None."""
        table = self.held[seq]
        start = seq.num_computed_tokens
        end = start + self.check_new(seq, num_new_tokens, start)
        need = blocks_needed(end, self.block_size) - len(table)     # a new block only when the last is full
        if need > self.pool.num_free:
            return None
        new = self.pool.allocate(need)
        table += new
        self.register(seq, table, start, end)
        return new

    def release(self, seq: Any) -> list[int]:
        """Every block back, the last first: the end of a sequence is evicted before its shared beginning."""
        released = self.held.pop(seq)[::-1]
        self.pool.free_all(released)
        return released
