"""Reference solution to chapter 7's block manager: chapter 2's, with fork and copy-on-write.

Saved as ``my_engine/block_manager.py`` it replaces chapter 2's file: the engine's parallel sampling
(``n > 1``) and beam search fork sequences, and a sequence that writes into a partly filled block
another sequence also holds first copies it (vLLM v0's rule, the paper's §4.4).
"""

from __future__ import annotations

from typing import Any

from pagedkv_edu.core.block_table import blocks_needed
from pagedkv_edu.exercises.solutions.block_manager import BlockManager as Chapter2Manager


class BlockManager(Chapter2Manager):
    """Chapter 2's decisions, with blocks shared by reference count and copied before a shared write."""

    def fork(self, parent: Any, child: Any) -> None:
        """The child holds every block of its parent: each gains a reference, nothing is copied yet."""
        self.check_new_id(child)
        table = self.held[parent]
        for block in table:
            self.pool.incref(block)
        self.held[child] = list(table)

    def grow(self, seq: Any, num_new_tokens: int) -> list[int] | None:
        """Chapter 2's growth, except that a shared, partly filled last block is first replaced by a copy."""
        table = self.held[seq]
        start = seq.num_computed_tokens
        end = start + self.check_new(seq, num_new_tokens, start)
        copy = num_new_tokens > 0 and start % self.block_size != 0 and self.pool.ref_counts[table[-1]] > 1
        need = blocks_needed(end, self.block_size) - len(table)
        if need + copy > self.pool.num_free:
            return None                                    # nothing taken, nothing changed
        new: list[int] = []
        if copy:
            shared, (own,) = table[-1], self.pool.allocate(1)
            self.pool.free(shared)                         # one holder fewer; the others keep it as it is
            table[-1] = own
            self.copies.copy.append((shared, own))         # the runner copies its K/V before the step writes
            new.append(own)
        appended = self.pool.allocate(need)
        table += appended
        self.register(seq, table, start, end)
        return new + appended

    def release(self, seq: Any) -> list[int]:
        """Chapter 2's release; a queued copy into a block now free is dropped (nobody will read it)."""
        released = super().release(seq)
        self.copies.copy = [(src, dst) for src, dst in self.copies.copy if self.pool.ref_counts[dst] > 0]
        return released
