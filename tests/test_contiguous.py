"""The contiguous arena of chapter 1: reservation rules, first-fit, holes and stranded space."""

from __future__ import annotations

import pytest

from pagedkv_edu.contiguous import (RESERVE_POLICIES, ContiguousArena, Extent, NoContiguousSpaceError,
                                    reservation_size)
from pagedkv_edu.workload import MAX_SEQ_LEN


def arena_state(arena: ContiguousArena) -> tuple:
    """Everything a refused call must leave alone."""
    return (arena.extents, arena.holes(), arena.reserved, arena.free)


def test_the_825_token_request_reserves_2048_and_wastes_1223() -> None:
    """Seed 000: 625 prompt + 200 output tokens under pre-allocate-max_seq_len."""
    final_len = 625 + 200
    reserved = reservation_size(final_len, MAX_SEQ_LEN, "max")
    assert reserved == 2048
    assert reserved - final_len == 1223
    assert round((reserved - final_len) / reserved, 2) == 0.60


def test_reservation_rules() -> None:
    assert [reservation_size(825, 2048, p) for p in RESERVE_POLICIES] == [2048, 1024, 825]
    assert reservation_size(1025, 2048, "pow2") == 2048
    assert reservation_size(1024, 2048, "pow2") == 1024
    assert reservation_size(1, 2048, "pow2") == 1
    assert reservation_size(1500, 1800, "pow2") == 1800  # capped at max_seq_len
    # pow2 never reserves less than needed, nor twice as much or more.
    for n in range(1, 2049, 37):
        assert n <= reservation_size(n, 2048, "pow2") < 2 * n


@pytest.mark.parametrize("args, bad", [
    ((825, 2048, "lru"), "unknown reservation policy 'lru'"),
    ((0, 2048, "max"), "final length 0 must be in 1..max_seq_len=2048"),
    ((2049, 2048, "oracle"), "final length 2049 must be in 1..max_seq_len=2048"),
    ((2.5, 2048, "pow2"), "final length 2.5 must be in 1..max_seq_len=2048"),
    ((True, 2048, "pow2"), "final length True must be in 1..max_seq_len=2048"),
    ((4, 0, "max"), "max_seq_len must be a whole number >= 1, got 0"),
])
def test_bad_reservations_are_refused(args, bad) -> None:
    with pytest.raises(ValueError, match=bad):
        reservation_size(*args)


def test_first_fit_takes_the_lowest_hole_that_fits() -> None:
    arena = ContiguousArena(16)
    assert [arena.allocate(o, 4).start for o in "abc"] == [0, 4, 8]
    arena.release("b")
    assert arena.holes() == [(4, 4), (12, 4)]
    assert arena.allocate("d", 2) == Extent("d", 4, 2)
    assert arena.allocate("e", 3) == Extent("e", 12, 3)  # the 2-slot hole at 6 is too small
    assert arena.allocate("f", 2) == Extent("f", 6, 2)
    assert [e.owner for e in arena.extents] == ["a", "d", "f", "c", "e"]
    assert arena.holes() == [(15, 1)] and (arena.reserved, arena.free) == (15, 1)


def test_first_fit_is_not_best_fit() -> None:
    """A 2-slot request goes to the 4-slot hole at 0, not to the exactly sized hole at 14."""
    arena = ContiguousArena(16)
    for owner, size in zip("abcd", (4, 4, 4, 2)):
        arena.allocate(owner, size)
    arena.release("a")
    assert arena.holes() == [(0, 4), (14, 2)]
    assert arena.allocate("e", 2).start == 0


def test_free_space_in_small_holes_is_stranded() -> None:
    """External fragmentation: 8 slots free in total, but no hole of 6."""
    arena = ContiguousArena(16)
    for owner in "abcd":
        arena.allocate(owner, 4)
    arena.release("a")
    arena.release("c")
    assert arena.free == 8 and arena.largest_hole() == 4
    assert arena.fits(4) and not arena.fits(6)
    assert arena.stranded(6) == 8 and arena.stranded(4) == 0 and arena.stranded(5) == 8
    before = arena_state(arena)
    with pytest.raises(NoContiguousSpaceError, match="no hole of 6 slots for 'x': 8 slots free, largest hole 4"):
        arena.allocate("x", 6)
    assert arena_state(arena) == before


def test_release_returns_the_extent_and_merges_holes() -> None:
    arena = ContiguousArena(12)
    for owner in "abc":
        arena.allocate(owner, 4)
    arena.release("a")
    assert arena.release("b") == Extent("b", 4, 4)
    assert arena.holes() == [(0, 8)] and arena.fits(8)


def test_duplicate_owner_is_refused() -> None:
    arena = ContiguousArena(16)
    arena.allocate("a", 4)
    before = arena_state(arena)
    with pytest.raises(KeyError, match="owner 'a' already holds a reservation"):
        arena.allocate("a", 2)
    assert arena_state(arena) == before


@pytest.mark.parametrize("size", [0, -3, 17, 2.5, None, True])
def test_bad_sizes_are_refused_by_value(size) -> None:
    arena = ContiguousArena(16)
    arena.allocate("a", 4)
    before = arena_state(arena)
    with pytest.raises(ValueError, match=rf"reservation size must be a whole number in 1\.\.16, got {size!r}"):
        arena.allocate("b", size)
    assert arena_state(arena) == before


def test_releasing_an_unknown_or_released_owner_is_refused() -> None:
    arena = ContiguousArena(16)
    arena.allocate("a", 4)
    arena.release("a")
    arena.allocate("b", 4)
    before = arena_state(arena)
    for owner in ("a", "zzz"):
        with pytest.raises(KeyError, match=f"owner '{owner}' holds no reservation"):
            arena.release(owner)
        assert arena_state(arena) == before


@pytest.mark.parametrize("capacity", [0, -1, 3.0])
def test_bad_capacity_is_refused(capacity) -> None:
    with pytest.raises(ValueError, match=f"got {capacity!r}"):
        ContiguousArena(capacity)


def test_an_empty_arena_is_one_hole() -> None:
    arena = ContiguousArena(10)
    assert arena.holes() == [(0, 10)] and arena.extents == [] and arena.largest_hole() == 10
    assert arena.allocate("all", 10) == Extent("all", 0, 10)
    assert arena.holes() == [] and arena.largest_hole() == 0 and not arena.fits(1)
