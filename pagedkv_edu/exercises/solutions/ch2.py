"""Reference solutions to chapter 2's exercises: the slot mapping and appending one token."""

from __future__ import annotations

from collections.abc import Sequence


def slot_mapping(block_table: Sequence[int], block_size: int, positions: Sequence[int]) -> list[int]:
    """Flat cache slot of each token position: ``table[pos // B] * B + pos % B``.

    ``pos // B`` is the logical block, the table turns it into a physical block, and
    ``pos % B`` is the offset inside that block.
    """
    return [block_table[pos // block_size] * block_size + pos % block_size for pos in positions]


def append_token(block_table: list[int], num_tokens: int, block_size: int, free_blocks: list[int]) -> int:
    """Store token number ``num_tokens`` (0-based) of a sequence; return its slot.

    A new block is taken from the front of ``free_blocks`` only when the sequence has no
    room left: when ``num_tokens`` is a multiple of the block size (an empty table
    included). Both lists are changed in place, as a block manager would.
    """
    if num_tokens % block_size == 0:
        block_table.append(free_blocks.pop(0))
    return block_table[-1] * block_size + num_tokens % block_size
