"""The block pool: a fixed number of equal-sized physical KV blocks, reference counts and a free queue.

PagedAttention's (Kwon et al., SOSP 2023) allocator, taught in chapter 2; chapter 7 shares blocks
by reference count, and chapter 8 explains the free queue's order, which decides what the prefix
cache evicts: without a prefix cache freed blocks join the back (nano-vllm's ``deque``); with
one, vLLM v1's order at ``c59cb79`` (uncached to the front, cached to the back). An
``OrderedDict`` stands in for vLLM's ``FreeKVCacheBlockQueue`` (O(1) removal from the middle).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Iterable, Literal, Sequence

from ..checks import check_whole, is_whole

MAX_NUM_BLOCKS = 2**21
"""The largest pool this book builds: the free queue and reference counts are Python objects,
so two million blocks (32 M token slots at block size 16) already cost a few hundred MB of
bookkeeping. A larger request is refused before anything is allocated."""


FreeOrder = Literal["vllm-v1", "append"]
"""Where freed blocks join the free queue when a prefix cache is attached (see the module docstring)."""
FREE_ORDERS: tuple[FreeOrder, ...] = ("vllm-v1", "append")


class OutOfBlocksError(RuntimeError):
    """The pool has fewer free blocks than an allocation needs. Nothing was allocated."""


class BlockPool:
    """``num_blocks`` physical blocks of ``block_size`` slots, with reference counts."""

    def __init__(self, num_blocks: int, block_size: int, free_order: FreeOrder = "vllm-v1") -> None:
        check_whole("block_size", block_size, 1)
        check_whole("num_blocks", num_blocks, 1, MAX_NUM_BLOCKS)
        if free_order not in FREE_ORDERS:
            raise ValueError(f"free_order must be one of {FREE_ORDERS}, got {free_order!r}")
        self.free_order: FreeOrder = free_order
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.ref_counts: list[int] = [0] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        # Called with each block ``allocate`` takes from the free queue. The prefix cache (chapter 8)
        # forgets the block's hash there: eviction is lazy, a freed block stays findable until reused.
        self.on_reuse: Callable[[int], None] | None = None
        # Asked, with the prefix cache attached, whether a freed block still holds findable K/V: it
        # decides the block's place in the free queue. None (no prefix cache): every freed block joins the back.
        self.is_cached: Callable[[int], bool] | None = None

    @classmethod
    def from_free_order(cls, num_blocks: int, block_size: int, free_order: Sequence[int]) -> "BlockPool":
        """A busy pool whose free queue is exactly ``free_order``.

        It is built the way a real pool gets there: every block is handed out, then the blocks
        in ``free_order`` are returned in that order (their requests finished). The others stay
        held by requests outside this example. The articles' walk-throughs start from such a pool.
        """
        pool = cls(num_blocks, block_size)
        free_order = list(free_order)
        for block_id in free_order:
            pool._check_id(block_id)
        if len(set(free_order)) != len(free_order):
            raise ValueError(f"free_order has repeated block ids: {free_order}")
        pool.allocate(num_blocks)
        for block_id in free_order:
            pool.free(block_id)
        return pool

    # --- queries -------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use (vLLM's ``1 - free/total``)."""
        return self.num_used / self.num_blocks

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def free_ids(self) -> list[int]:
        """The free queue, front (next to be handed out) first."""
        return list(self._free)

    def is_free(self, block_id: int) -> bool:
        self._check_id(block_id)
        return self.ref_counts[block_id] == 0

    # --- changes -------------------------------------------------------------------
    def allocate(self, n: int = 1) -> list[int]:
        """Take ``n`` blocks from the front of the free queue (all or none)."""
        check_whole("n (blocks to allocate)", n)
        if n > len(self._free):
            raise OutOfBlocksError(f"asked for {n} blocks but only {len(self._free)} of {self.num_blocks} are free")
        ids = [self._free.popitem(last=False)[0] for _ in range(n)]
        for block_id in ids:
            self.ref_counts[block_id] = 1
            if self.on_reuse is not None:
                self.on_reuse(block_id)
        return ids

    def touch(self, block_id: int) -> None:
        """Take a reference to a block the prefix cache found, free or not (vLLM v1's ``touch``).

        An owned block gains a reference. A free block that still holds cached K/V is pulled out
        of the middle of the free queue, so it cannot be handed to someone else, and now has one
        reference. Its contents are kept: that is the point of the hit.
        """
        self._check_id(block_id)
        if self.ref_counts[block_id] == 0:
            del self._free[block_id]
        self.ref_counts[block_id] += 1

    def incref(self, block_id: int) -> None:
        """Add a reference to an owned block (a second sequence now points at it)."""
        self._check_id(block_id)
        if self.ref_counts[block_id] == 0:
            raise ValueError(f"block {block_id} is free; cannot share a block nobody owns")
        self.ref_counts[block_id] += 1

    def free(self, block_id: int) -> bool:
        """Drop one reference; the block rejoins the free queue when none is left.

        Returns True when the block became free.
        """
        self._check_id(block_id)
        if self.ref_counts[block_id] == 0:
            raise ValueError(f"block {block_id} is already free (double free)")
        self.ref_counts[block_id] -= 1
        if self.ref_counts[block_id]:
            return False
        self._enqueue([block_id])
        return True

    def free_all(self, block_ids: Iterable[int]) -> None:
        """Free several blocks, first to be evicted first, after checking all of them (a bad id changes nothing).

        As vLLM v1's ``free_blocks``: the blocks that become free keep their given order, the
        uncached ones at the front of the queue and the cached ones at the back.
        """
        ids = list(block_ids)
        pending: dict[int, int] = {}
        for block_id in ids:
            self._check_id(block_id)
            pending[block_id] = pending.get(block_id, 0) + 1
            if pending[block_id] > self.ref_counts[block_id]:
                raise ValueError(f"block {block_id} would be freed more times than it is referenced")
        freed = []
        for block_id in ids:
            self.ref_counts[block_id] -= 1
            if self.ref_counts[block_id] == 0:
                freed.append(block_id)
        self._enqueue(freed)

    def _enqueue(self, freed: list[int]) -> None:
        """Put blocks that just became free into the queue: uncached ones in front, in their order."""
        if self.is_cached is None or self.free_order == "append":
            fresh, kept = [], freed
        else:
            fresh = [b for b in freed if not self.is_cached(b)]
            kept = [b for b in freed if self.is_cached(b)]
        for block_id in reversed(fresh):
            self._free[block_id] = None
            self._free.move_to_end(block_id, last=False)
        for block_id in kept:
            self._free[block_id] = None

    def _check_id(self, block_id: int) -> None:
        if not is_whole(block_id) or not 0 <= block_id < self.num_blocks:
            raise IndexError(f"block id {block_id!r} is out of range for a pool of {self.num_blocks} blocks")

    def __repr__(self) -> str:
        return (f"BlockPool(num_blocks={self.num_blocks}, block_size={self.block_size}, "
                f"used={self.num_used}, free={self.num_free})")
