"""A block table: one sequence's map from logical blocks to physical blocks (chapter 2).

``slot = block_table[i // B] * B + i % B``; a block is allocated only when the last one is full,
so a sequence wastes less than one block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .block_pool import BlockPool, OutOfBlocksError
from ..checks import check_whole, is_whole


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """ceil(num_tokens / block_size): the blocks that hold ``num_tokens`` tokens."""
    check_whole("num_tokens", num_tokens)
    check_whole("block_size", block_size, 1)
    return -(-num_tokens // block_size)


@dataclass
class BlockTable:
    """Logical-to-physical block entries and the token count of one sequence."""

    block_size: int
    block_ids: list[int] = field(default_factory=list)
    num_tokens: int = 0

    def __post_init__(self) -> None:
        check_whole("block_size", self.block_size, 1)
        check_whole("num_tokens", self.num_tokens)
        bad = [b for b in self.block_ids if not is_whole(b) or b < 0]
        if bad:
            raise ValueError(f"block ids must be whole numbers >= 0, got {bad}")
        if blocks_needed(self.num_tokens, self.block_size) != len(self.block_ids):
            raise ValueError(
                f"{self.num_tokens} tokens need {blocks_needed(self.num_tokens, self.block_size)} blocks "
                f"of {self.block_size}, but the table has {len(self.block_ids)}"
            )

    @property
    def capacity(self) -> int:
        """Slots in the blocks this table holds."""
        return len(self.block_ids) * self.block_size

    @property
    def fills(self) -> list[int]:
        """Filled slots of each block: full blocks, then the (possibly partial) last one."""
        fills = [self.block_size] * len(self.block_ids)
        if fills:
            fills[-1] = self.num_tokens - (len(self.block_ids) - 1) * self.block_size
        return fills

    @property
    def waste(self) -> int:
        """Empty slots in the last block: the only waste a paged sequence has."""
        return self.capacity - self.num_tokens

    def blocks_to_append(self, n: int) -> int:
        """How many new blocks appending ``n`` tokens would allocate."""
        check_whole("n (tokens to append)", n)
        # blocks_needed's arithmetic without its checks: the table's own count and size were checked (asked every step)
        return -(-(self.num_tokens + n) // self.block_size) - len(self.block_ids)

    def append_tokens(self, pool: BlockPool, n: int = 1) -> list[int]:
        """Account for ``n`` more tokens, allocating blocks only when the last is full.

        All-or-nothing: if the pool cannot supply the blocks, nothing changes and
        ``OutOfBlocksError`` is raised. Returns the newly allocated block ids.
        """
        need = self.blocks_to_append(n)
        if pool.block_size != self.block_size:
            raise ValueError(f"pool block_size {pool.block_size} != table block_size {self.block_size}")
        if need > pool.num_free:
            raise OutOfBlocksError(f"appending {n} tokens needs {need} new blocks; the pool has {pool.num_free} free")
        new = pool.allocate(need) if need else []   # most steps fill a slot of the last block
        self.block_ids.extend(new)
        self.num_tokens += n
        return new

    def slot(self, position: int) -> int:
        """Flat cache slot of token ``position``: ``table[pos // B] * B + pos % B``."""
        if not is_whole(position) or not 0 <= position < self.num_tokens:
            raise IndexError(
                f"position {position!r} is past the table: it holds {self.num_tokens} tokens "
                f"in blocks {self.block_ids}"
            )
        return self.block_ids[position // self.block_size] * self.block_size + position % self.block_size

    def slot_mapping(self, start: int = 0, end: int | None = None) -> list[int]:
        """Slots of positions ``start .. end-1`` (default: every token)."""
        end = self.num_tokens if end is None else end
        if not (is_whole(start) and is_whole(end) and 0 <= start <= end <= self.num_tokens):
            raise IndexError(f"range [{start!r}, {end!r}) is outside the table's {self.num_tokens} tokens")
        return [self.slot(p) for p in range(start, end)]

    def release(self, pool: BlockPool) -> list[int]:
        """Return every block to the pool, last block first, and empty the table.

        Tail-first order means that, in chapter 8's prefix cache, the end of a sequence is
        evicted before its shared beginning.
        """
        released = list(reversed(self.block_ids))
        pool.free_all(released)
        self.block_ids = []
        self.num_tokens = 0
        return released

    def rows(self) -> list[tuple[int, int, int]]:
        """(logical block, physical block, filled slots) rows, as the seed prints them."""
        return [(i, b, f) for i, (b, f) in enumerate(zip(self.block_ids, self.fills))]

    def __str__(self) -> str:
        lines = ["logical  physical  filled"]
        lines += [f"{i:>7}  {b:>8}  {f:>3} / {self.block_size}" for i, b, f in self.rows()]
        return "\n".join(lines)
