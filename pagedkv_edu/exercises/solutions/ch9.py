"""Reference solution for chapter 9 (block size): the empty slots of a sequence's last block."""

from __future__ import annotations


def last_block_waste(num_tokens: int, block_size: int) -> int:
    """Slots allocated but empty: ``ceil(n / B) * B - n`` (0 when the last block is full)."""
    return -(-num_tokens // block_size) * block_size - num_tokens
