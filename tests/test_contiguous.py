"""The contiguous arena of chapter 1: the paper's reservation rules, first-fit and buddy, holes and stranded space."""

from __future__ import annotations

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_edu.sim.contiguous import (ALLOCATORS, RESERVE_POLICIES, BuddyArena, ContiguousArena, Extent,
                                    NoContiguousSpaceError, make_arena, next_power_of_two, reservation_size)
from pagedkv_edu.paper_workloads import ALPACA, SHAREGPT, paper_shaped
from pagedkv_edu.sim.simulate import simulate
from pagedkv_edu.workload import Request
from pagedkv_edu.workload import MAX_SEQ_LEN


def arena_state(arena: ContiguousArena) -> tuple:
    """Everything a refused call must leave alone."""
    return (arena.extents, arena.holes(), arena.reserved, arena.free)


def test_the_825_token_request_reserves_2048_and_wastes_1223() -> None:
    """The article's typical request: 625 prompt + 200 output tokens under pre-allocate-max_seq_len."""
    reserved = reservation_size(625, 200, MAX_SEQ_LEN, "max")
    assert reserved == 2048
    assert reserved - 825 == 1223
    assert round((reserved - 825) / reserved, 2) == 0.60


def test_reservation_rules_are_the_papers() -> None:
    """Max: max_seq_len; Pow2: the prompt exactly + the output rounded up to a power of two; Oracle: exact."""
    assert [reservation_size(625, 200, 2048, p) for p in RESERVE_POLICIES] == [2048, 625 + 256, 824]   # oracle: the last token is never stored
    assert reservation_size(100, 25, 2048, "pow2") == 100 + 32        # the paper's example: 25 reserves 32
    assert reservation_size(100, 32, 2048, "pow2") == 132             # a power of two is reserved exactly
    assert reservation_size(100, 0, 2048, "pow2") == 100
    assert reservation_size(1100, 900, 2048, "pow2") == 2048          # 1100 + 1024 capped at max_seq_len
    # Pow2 reserves at least the final length, and less than twice the output on top of it.
    for prompt in range(1, 1024, 97):
        for output in range(1, 1024, 41):
            size = reservation_size(prompt, output, 2048, "pow2")
            assert prompt + output <= size < prompt + 2 * output


def test_pow2_is_not_the_power_of_two_of_the_final_length() -> None:
    """The old (wrong) reading rounded prompt + output; the paper rounds the output only."""
    assert reservation_size(600, 300, 2048, "pow2") == 1112 != next_power_of_two(900)


@pytest.mark.parametrize("args, bad", [
    ((625, 200, 2048, "lru"), "unknown reservation policy 'lru'"),
    ((0, 200, 2048, "max"), "prompt length must be a whole number >= 1, got 0"),
    ((10, -1, 2048, "max"), "output length must be a whole number >= 0, got -1"),
    ((2000, 49, 2048, "oracle"), "final length 2000 \\+ 49 exceeds max_seq_len=2048"),
    ((2.5, 10, 2048, "pow2"), "prompt length must be a whole number >= 1, got 2.5"),
    ((True, 10, 2048, "pow2"), "prompt length must be a whole number >= 1, got True"),
    ((4, 0, 0, "max"), "max_seq_len must be a whole number >= 1, got 0"),
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


# ---- the buddy allocator -------------------------------------------------------------------------

def test_buddy_rounds_up_splits_and_aligns() -> None:
    arena = BuddyArena(16)
    assert arena.allocate("a", 3) == Extent("a", 0, 4)      # 3 rounded up to 4
    assert arena.holes() == [(4, 4), (8, 8)]               # 16 split into 8 + 4 + (4 taken)
    assert arena.allocate("b", 5) == Extent("b", 8, 8)      # 5 -> 8, aligned to 8
    assert arena.allocate("c", 1) == Extent("c", 4, 1)
    assert arena.holes() == [(5, 1), (6, 2)]
    assert (arena.reserved, arena.free) == (13, 3)


def test_buddy_merges_only_with_its_buddy() -> None:
    """Free neighbours that are not buddies stay two holes: 8 slots free, no block of 8."""
    arena = BuddyArena(16)
    for owner in "abcd":
        arena.allocate(owner, 4)                       # a:0 b:4 c:8 d:12
    arena.release("b")
    arena.release("c")                                 # 4..11 free, but 4 and 8 are not buddies
    assert arena.holes() == [(4, 4), (8, 4)] and arena.free == 8
    assert not arena.fits(8) and arena.stranded(8) == 8 and arena.stranded(4) == 0
    before = (arena.extents, arena.holes())
    with pytest.raises(NoContiguousSpaceError, match="no free buddy block of 8 slots for 'x' \\(5 rounded up\\)"):
        arena.allocate("x", 5)
    assert (arena.extents, arena.holes()) == before
    arena.release("a")                                 # 0 and 4 are buddies -> 0..7, not yet with 8
    assert arena.holes() == [(0, 8), (8, 4)]
    arena.release("d")                                 # 8 and 12 -> 8..15, then 0..7 + 8..15 -> 0..15
    assert arena.holes() == [(0, 16)]


def test_first_fit_would_have_merged_the_same_neighbours() -> None:
    arena = ContiguousArena(16)
    for owner in "abcd":
        arena.allocate(owner, 4)
    arena.release("b")
    arena.release("c")
    assert arena.fits(8)


def test_buddy_capacity_that_is_not_a_power_of_two() -> None:
    arena = BuddyArena(12)                             # 8 + 4
    assert arena.holes() == [(0, 8), (8, 4)] and arena.max_allocation == 8
    with pytest.raises(ValueError, match="reservation size \\(at most the largest buddy block\\) must be a whole number in 1..8, got 9"):
        arena.allocate("a", 9)
    arena.allocate("a", 4)
    arena.allocate("b", 4)
    arena.release("b")
    arena.release("a")
    assert arena.holes() == [(0, 8), (8, 4)]           # never merged past the initial blocks


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 200), st.lists(st.tuples(st.booleans(), st.integers(1, 70)), max_size=40))
def test_buddy_invariants(capacity, ops) -> None:
    """Blocks are powers of two aligned to their size; allocated and free blocks tile the arena."""
    arena = BuddyArena(capacity)
    live: list[int] = []
    for i, (alloc, size) in enumerate(ops):
        if alloc or not live:
            if size <= arena.max_allocation and arena.fits(size):
                extent = arena.allocate(i, size)
                assert extent.size == next_power_of_two(size) and extent.start % extent.size == 0
                live.append(i)
            elif size <= arena.max_allocation:
                with pytest.raises(NoContiguousSpaceError):
                    arena.allocate(i, size)
        else:
            arena.release(live.pop(size % len(live)))
        pieces = sorted([(e.start, e.size) for e in arena.extents] + arena.holes())
        assert sum(s for _, s in pieces) == capacity
        assert arena.reserved == sum(e.size for e in arena.extents)   # the count kept as blocks come and go
        assert all(a + s == b for (a, s), (b, _) in zip(pieces, pieces[1:]))
        assert all(start % size == 0 and size & (size - 1) == 0 for start, size in arena.holes())
    for owner in list(live):
        arena.release(owner)
    assert arena.free == capacity and len(arena.holes()) == bin(capacity).count("1")


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 200), st.lists(st.tuples(st.booleans(), st.integers(1, 70)), max_size=40))
def test_first_fit_keeps_its_reserved_count(capacity, ops) -> None:
    """The reserved count the simulator reads every step is the extents' sum, after any allocations and releases."""
    arena = ContiguousArena(capacity)
    live: list[int] = []
    for i, (alloc, size) in enumerate(ops):
        if (alloc or not live) and size <= capacity:
            try:
                arena.allocate(i, size)
                live.append(i)
            except NoContiguousSpaceError:
                pass
        elif live:
            arena.release(live.pop(size % len(live)))
        assert arena.reserved == sum(e.size for e in arena.extents) == capacity - arena.free
        assert arena.free == sum(size for _, size in arena.holes())


def test_make_arena_names_the_allocator() -> None:
    assert [make_arena(16, a).allocator for a in ALLOCATORS] == ["first-fit", "buddy"]
    with pytest.raises(ValueError, match="unknown allocator 'slab'"):
        make_arena(16, "slab")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 20), st.integers(0, 15)), min_size=1, max_size=8),
       st.sampled_from(RESERVE_POLICIES), st.integers(0, 64))
def test_buddy_simulation_accounts_for_every_slot(workload, reserve, spare) -> None:
    reqs = [Request(i, p, o, arrival, shared_prefix_len=0) for i, (p, o, arrival) in enumerate(workload)]
    budget = max(next_power_of_two(reservation_size(r.prompt_len, r.output_len, 64, reserve)) for r in reqs) + spare
    result = simulate(reqs, "contiguous", budget, max_seq_len=64, reserve=reserve, allocator="buddy", max_steps=5_000)
    assert result.allocator == "buddy"
    assert all(r.finish_step is not None for r in result.requests)
    assert all(s.used + s.over_reserved + s.internal + s.external + s.free == budget for s in result.steps)


# ---- the paper's baselines on paper-shaped workloads ------------------------------------------------

def test_paper_shaped_workloads_have_the_papers_means() -> None:
    for shape in (SHAREGPT, ALPACA):
        reqs = paper_shaped(shape, 2000)
        assert abs(sum(r.prompt_len for r in reqs) / len(reqs) / shape.mean_input - 1) < 0.08
        assert abs(sum(r.output_len for r in reqs) / len(reqs) / shape.mean_output - 1) < 0.08
        assert all(r.final_len <= 2048 for r in reqs)
    assert paper_shaped("ShareGPT", 5) == paper_shaped(SHAREGPT, 5)            # seeded
    with pytest.raises(ValueError, match="unknown dataset 'LMSYS'"):
        paper_shaped("LMSYS")


def test_sharegpt_shaped_buddy_baselines_land_near_the_papers_figure_2() -> None:
    """Max < Pow2 < Oracle << paged, each within 5 points of the paper's 20.4 / 26.8 / 38.2 / 96.3%."""
    from pagedkv_edu.paper_workloads import FIGURE_2_KV_UTILISATION as paper, PAPER_KV_SLOTS_OPT13B
    reqs = paper_shaped(SHAREGPT, 120)
    got = {p: simulate(reqs, "contiguous", PAPER_KV_SLOTS_OPT13B, reserve=p, allocator="buddy").utilisation
           for p in RESERVE_POLICIES}
    got["paged"] = simulate(reqs, "paged", PAPER_KV_SLOTS_OPT13B).utilisation
    assert got["max"] < got["pow2"] < got["oracle"] < got["paged"]
    assert all(abs(got[k] - paper[k]) < 0.05 for k in paper), got


def test_the_command_line_offers_the_buddy_allocator(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from pagedkv_edu.cli import main
    from pagedkv_edu.workload import copilot50

    main(["simulate", "--policy", "contiguous", "--reserve", "pow2", "--allocator", "buddy", "--json"])
    got = json.loads(capsys.readouterr().out)
    assert got == simulate(copilot50(0), "contiguous", 10 * 2048, reserve="pow2", allocator="buddy").summary()
