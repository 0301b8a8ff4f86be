"""Reference solutions to chapter 7's exercises: copy-on-write, and beam search's fork and free."""

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


def regroup_beams(tables: list[list[int]], ref_counts: list[int], free_blocks: list[int],
                  parents: list[int]) -> list[list[int]]:
    """The beams' block tables after one step of beam search chose ``parents`` (one per new beam).

    A beam that no new beam continues is freed: each of its blocks loses a reference and
    joins the free list at 0. A parent's first child is the parent itself; each further child
    is a fork, a copy of the parent's table whose every block gains a reference.
    """
    for i, table in enumerate(tables):
        if i not in parents:
            for block in table:
                ref_counts[block] -= 1
                if ref_counts[block] == 0:
                    free_blocks.append(block)
    new: list[list[int]] = []
    seen: set[int] = set()
    for p in parents:
        if p in seen:
            for block in tables[p]:
                ref_counts[block] += 1
            new.append(list(tables[p]))
        else:
            seen.add(p)
            new.append(tables[p])
    return new
