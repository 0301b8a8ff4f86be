"""The naive contiguous KV cache of chapter 1: one linear arena, first-fit reservations.

Before PagedAttention, a serving system gave every request one contiguous range of KV slots,
reserved when the request was admitted and sized for the longest sequence it *might* reach
(``max_seq_len``), because the output length is unknown until the request ends. The arena is
a linear address space; a reservation is placed in the first hole large enough (first-fit).

Three kinds of waste follow, and chapter 1 measures each on its own:

* **internal fragmentation**: reserved slots the request will never use;
* **over-reservation**: reserved slots it will use, but not yet;
* **external fragmentation**: free slots in holes too small for the next reservation.

The paper compares three reservation rules (Kwon et al., §6, after Orca): reserve the
maximum (``max``), the next power of two of the final length (``pow2``, at most 2x), or the
exact final length (``oracle``, impossible in practice but a useful bound).
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable
from dataclasses import dataclass

from .checks import check_whole, is_whole

RESERVE_POLICIES = ("max", "pow2", "oracle")


class NoContiguousSpaceError(RuntimeError):
    """No single hole is large enough for a reservation (the arena state is unchanged)."""


def reservation_size(final_len: int, max_seq_len: int, policy: str = "max") -> int:
    """Slots a contiguous system reserves for a request that will end at ``final_len`` tokens."""
    if policy not in RESERVE_POLICIES:
        raise ValueError(f"unknown reservation policy {policy!r}; choose one of {RESERVE_POLICIES}")
    check_whole("max_seq_len", max_seq_len, 1)
    if not is_whole(final_len) or not 0 < final_len <= max_seq_len:
        raise ValueError(f"final length {final_len!r} must be in 1..max_seq_len={max_seq_len}")
    if policy == "max":
        return max_seq_len
    if policy == "pow2":
        return min(max_seq_len, 1 << (final_len - 1).bit_length())
    return final_len


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

    def __init__(self, capacity: int) -> None:
        check_whole("arena capacity", capacity, 1)
        self.capacity = capacity
        self._extents: list[Extent] = []  # sorted by start
        self._by_owner: dict[Hashable, Extent] = {}

    @property
    def extents(self) -> list[Extent]:
        return list(self._extents)

    @property
    def reserved(self) -> int:
        return sum(e.size for e in self._extents)

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

    def largest_hole(self) -> int:
        return max((size for _, size in self.holes()), default=0)

    def fits(self, size: int) -> bool:
        return self.largest_hole() >= size

    def allocate(self, owner: Hashable, size: int) -> Extent:
        """Reserve ``size`` contiguous slots in the first hole that fits."""
        if owner in self._by_owner:
            raise KeyError(f"owner {owner!r} already holds a reservation")
        check_whole("reservation size", size, 1, self.capacity)
        for start, hole in self.holes():
            if hole >= size:
                extent = Extent(owner, start, size)
                bisect.insort(self._extents, extent, key=lambda e: e.start)
                self._by_owner[owner] = extent
                return extent
        raise NoContiguousSpaceError(
            f"no hole of {size} slots for {owner!r}: {self.free} slots free, largest hole {self.largest_hole()}"
        )

    def release(self, owner: Hashable) -> Extent:
        """Free the reservation of ``owner``."""
        try:
            extent = self._by_owner.pop(owner)
        except KeyError:
            raise KeyError(f"owner {owner!r} holds no reservation (never allocated, or already freed)") from None
        self._extents.remove(extent)
        return extent

    def stranded(self, next_size: int) -> int:
        """Free slots in holes smaller than ``next_size``: external fragmentation for that request."""
        return sum(size for _, size in self.holes() if size < next_size)
