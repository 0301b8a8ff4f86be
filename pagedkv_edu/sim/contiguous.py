"""The contiguous KV cache before PagedAttention: one reserved range per request in a linear arena (chapter 1).

A request gets one range, reserved at admission and sized by a policy (``max``, ``pow2``,
``oracle``: the paper's three Orca baselines, §6.1), placed first-fit (:class:`ContiguousArena`)
or by a buddy allocator (:class:`BuddyArena`, the paper's Orca). Chapter 1 measures the three
wastes this causes: internal fragmentation, over-reservation, external fragmentation.
:class:`ContiguousMemory` is the arena as the scheduler's memory, for the simulator (the
engine's contiguous policy is a block manager whose one block is a ``max_seq_len`` reservation).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from ..core.block_manager import BlockCopies, MemoryUsage
from ..core.prefix_cache import NO_HIT, PrefixHit
from ..checks import check_whole

RESERVE_POLICIES = ("max", "pow2", "oracle")
ALLOCATORS = ("first-fit", "buddy")


class NoContiguousSpaceError(RuntimeError):
    """No single hole is large enough for a reservation (the arena state is unchanged)."""


def next_power_of_two(n: int) -> int:
    """The smallest power of two >= ``n`` (``n`` >= 1)."""
    check_whole("n", n, 1)
    return 1 << (n - 1).bit_length()


def reservation_size(prompt_len: int, output_len: int, max_seq_len: int, policy: str = "max") -> int:
    """Slots a contiguous system reserves, at admission, for a prompt that will produce ``output_len`` tokens.

    The prompt is known, so every policy but ``max`` reserves it exactly; the policies differ in
    what they set aside for the output (see the module docstring). ``pow2`` and ``oracle`` read
    the true output length, which is what makes them reference points rather than real systems.
    ``pow2`` is capped at ``max_seq_len``, the most any request can reach.
    """
    if policy not in RESERVE_POLICIES:
        raise ValueError(f"unknown reservation policy {policy!r}; choose one of {RESERVE_POLICIES}")
    check_whole("max_seq_len", max_seq_len, 1)
    check_whole("prompt length", prompt_len, 1)
    check_whole("output length", output_len, 0)
    if prompt_len + output_len > max_seq_len:
        raise ValueError(f"final length {prompt_len} + {output_len} exceeds max_seq_len={max_seq_len}")
    if policy == "max":
        return max_seq_len
    if policy == "pow2":
        return min(max_seq_len, prompt_len + (next_power_of_two(output_len) if output_len else 0))
    return prompt_len + max(output_len - 1, 0)   # the last token is sampled, never stored


@dataclass(frozen=True)
class Extent:
    """A reserved range ``[start, start + size)`` of the arena."""

    owner: Hashable
    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size


class ContiguousArena:
    """A linear arena of ``capacity`` slots with first-fit allocation of contiguous ranges."""

    allocator = "first-fit"

    def __init__(self, capacity: int) -> None:
        check_whole("arena capacity", capacity, 1)
        self.capacity = capacity
        self._extents: list[Extent] = []  # sorted by start
        self._by_owner: dict[Hashable, Extent] = {}
        self._reserved = 0                # sum of the extents' sizes, kept as they come and go (read every step)

    @property
    def extents(self) -> list[Extent]:
        return list(self._extents)

    @property
    def reserved(self) -> int:
        return self._reserved

    @property
    def free(self) -> int:
        return self.capacity - self.reserved

    def holes(self) -> list[tuple[int, int]]:
        """Free ranges as (start, size), in address order."""
        holes, cursor = [], 0
        for extent in self._extents:
            if extent.start > cursor:
                holes.append((cursor, extent.start - cursor))
            cursor = extent.end
        if cursor < self.capacity:
            holes.append((cursor, self.capacity - cursor))
        return holes

    def extent(self, owner: Hashable) -> Extent:
        """The reservation ``owner`` holds."""
        try:
            return self._by_owner[owner]
        except KeyError:
            raise KeyError(f"owner {owner!r} holds no reservation (never allocated, or already freed)") from None

    def _check_new_owner(self, owner: Hashable) -> None:
        if owner in self._by_owner:
            raise KeyError(f"owner {owner!r} already holds a reservation")

    def _hold(self, extent: Extent) -> Extent:
        bisect.insort(self._extents, extent, key=lambda e: e.start)
        self._by_owner[extent.owner] = extent
        self._reserved += extent.size
        return extent

    def _drop(self, owner: Hashable) -> Extent:
        extent = self.extent(owner)
        del self._by_owner[owner]
        self._extents.remove(extent)
        self._reserved -= extent.size
        return extent

    def largest_hole(self) -> int:
        return max((size for _, size in self.holes()), default=0)

    @property
    def max_allocation(self) -> int:
        """The largest reservation an empty arena could hold."""
        return self.capacity

    def fits(self, size: int) -> bool:
        return self.largest_hole() >= size

    def allocate(self, owner: Hashable, size: int) -> Extent:
        """Reserve ``size`` contiguous slots in the first hole that fits."""
        self._check_new_owner(owner)
        check_whole("reservation size", size, 1, self.capacity)
        for start, hole in self.holes():
            if hole >= size:
                return self._hold(Extent(owner, start, size))
        raise NoContiguousSpaceError(
            f"no hole of {size} slots for {owner!r}: {self.free} slots free, largest hole {self.largest_hole()}"
        )

    def release(self, owner: Hashable) -> Extent:
        """Free the reservation of ``owner``."""
        return self._drop(owner)

    def stranded(self, next_size: int) -> int:
        """Free slots in holes smaller than ``next_size``: external fragmentation for that request."""
        return sum(size for _, size in self.holes() if size < next_size)


class BuddyArena(ContiguousArena):
    """A linear arena of ``capacity`` slots managed by a binary buddy allocator, as the paper's Orca.

    A request for ``size`` slots gets a block of ``next_power_of_two(size)`` slots, aligned to its
    size: the rounding is internal fragmentation on top of the reservation policy's. A free block
    merges only with its *buddy* (the other half of the block it was split from), so two free
    neighbours that are not buddies stay two holes: external fragmentation a first-fit arena would
    not have. A capacity that is not a power of two starts as its binary decomposition (12 = 8 + 4).
    Same interface as :class:`ContiguousArena` (and its owner bookkeeping), so the simulator
    can swap one for the other.
    """

    allocator = "buddy"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._free: dict[int, set[int]] = {}           # block size -> starts of free blocks of that size
        start = 0
        for bit in reversed(range(capacity.bit_length())):
            if capacity >> bit & 1:
                self._free.setdefault(1 << bit, set()).add(start)
                start += 1 << bit
        self._top = 1 << (capacity.bit_length() - 1)   # the largest block there will ever be

    @property
    def max_allocation(self) -> int:
        """The largest reservation an empty arena could hold: its largest initial block."""
        return self._top

    def holes(self) -> list[tuple[int, int]]:
        """Free blocks as (start, size), in address order (neighbours that are not buddies stay apart)."""
        return sorted((start, size) for size, starts in self._free.items() for start in starts)

    def largest_hole(self) -> int:
        return max((size for size, starts in self._free.items() if starts), default=0)

    def fits(self, size: int) -> bool:
        return self.largest_hole() >= next_power_of_two(size)

    def allocate(self, owner: Hashable, size: int) -> Extent:
        """Take the lowest-address smallest free block that holds ``next_power_of_two(size)``, splitting it."""
        self._check_new_owner(owner)
        check_whole("reservation size (at most the largest buddy block)", size, 1, self._top)
        need = next_power_of_two(size)
        candidates = [b for b, starts in self._free.items() if b >= need and starts]
        if not candidates:
            raise NoContiguousSpaceError(
                f"no free buddy block of {need} slots for {owner!r} ({size} rounded up): {self.free} slots free, "
                f"largest block {self.largest_hole()}"
            )
        block = min(candidates)
        start = min(self._free[block])
        self._free[block].remove(start)
        while block > need:                             # split, keeping the lower half, freeing the upper
            block //= 2
            self._free.setdefault(block, set()).add(start + block)
        return self._hold(Extent(owner, start, need))

    def release(self, owner: Hashable) -> Extent:
        """Free ``owner``'s block and merge it with its buddy for as long as the buddy is free."""
        extent = self._drop(owner)
        start, block = extent.start, extent.size
        while block < self._top and (start ^ block) in self._free.get(block, ()):
            self._free[block].remove(start ^ block)
            start, block = min(start, start ^ block), block * 2
        self._free.setdefault(block, set()).add(start)
        return extent

    def stranded(self, next_size: int) -> int:
        """Free slots in blocks smaller than ``next_size`` rounded up: external fragmentation for it."""
        need = next_power_of_two(next_size)
        return sum(size * len(starts) for size, starts in self._free.items() if size < need)


def make_arena(capacity: int, allocator: str = "first-fit") -> ContiguousArena:
    """An empty arena of ``capacity`` slots managed by ``allocator`` (``first-fit`` or ``buddy``)."""
    if allocator not in ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}; choose one of {ALLOCATORS}")
    return ContiguousArena(capacity) if allocator == "first-fit" else BuddyArena(capacity)


class ContiguousMemory:
    """The scheduler's memory as one reservation per sequence in ``arena``, of ``reservation(seq)`` slots.

    The same calls as the block manager's (:class:`~pagedkv_edu.core.protocols.KVMemory`), with no
    blocks, so no sharing: a prefix cache, fork and swap need block tables. The token counts are
    the records'.
    """

    swap = None
    prefix_cache = None

    def __init__(self, arena: ContiguousArena, reservation: Callable[[Any], int]) -> None:
        self.arena = arena
        self.reservation = reservation
        self.held: list[Any] = []          # the records holding a reservation, in admission order

    def fits(self, num_tokens: int) -> bool:
        return num_tokens <= self.arena.max_allocation

    def lookup(self, seq: Any) -> PrefixHit:
        return NO_HIT

    def admit(self, seq: Any, num_new_tokens: int, hit: PrefixHit = NO_HIT) -> list[int] | None:
        size = self.reservation(seq)
        if num_new_tokens > size or not self.arena.fits(size):
            return None
        self.arena.allocate(seq.seq_id, size)
        self.held.append(seq)
        return []

    def grow(self, seq: Any, num_new_tokens: int) -> list[int] | None:
        return [] if seq.num_computed_tokens + num_new_tokens <= self.arena.extent(seq.seq_id).size else None

    def fork(self, parent: Any, child: Any) -> None:
        raise ValueError("a contiguous reservation cannot be shared: forking needs paged memory")

    def release(self, seq: Any) -> list[int]:
        self.arena.release(seq.seq_id)
        self.held.remove(seq)
        return []

    def swap_out(self, seq: Any) -> bool:
        return False

    def take_copies(self) -> BlockCopies:
        return BlockCopies()

    def block_ids(self, seq: Any) -> list[int]:
        return []

    def usage(self) -> MemoryUsage:
        return MemoryUsage(sum(s.num_computed_tokens for s in self.held), self.arena.reserved, self.arena.capacity)
