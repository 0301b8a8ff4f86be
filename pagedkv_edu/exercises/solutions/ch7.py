"""Reference solutions to chapter 7's exercises: copy-on-write."""

from __future__ import annotations


def append_with_cow(block_table: list[int], num_tokens: int, block_size: int, ref_counts: list[int],
                    free_blocks: list[int]) -> tuple[int, tuple[int, int] | None]:
    """Store token number ``num_tokens`` (0-based) of a sequence that may share blocks.

    Returns its slot and the block copy the step needs, ``(source, destination)`` or None.
    A full last block (or an empty table) means a new block from the front of the free list.
    A partly filled last block that another sequence also references is replaced by a fresh
    block first, copy-on-write: this sequence drops its reference to the shared one, and
    the copy brings the tokens already there into the new block. All lists change in place.
    """
    copy = None
    if num_tokens % block_size == 0:
        block_table.append(free_blocks.pop(0))
        ref_counts[block_table[-1]] = 1
    elif ref_counts[block_table[-1]] > 1:
        shared, own = block_table[-1], free_blocks.pop(0)
        ref_counts[shared] -= 1
        ref_counts[own] = 1
        block_table[-1] = own
        copy = (shared, own)
    return block_table[-1] * block_size + num_tokens % block_size, copy
