"""Hypothesis property tests: random histories of the block manager, the contiguous arena and the simulator.

Each state machine predicts, from a model of its own, whether an operation must succeed. Bad
operations (admitting twice, unknown sequences, double frees, positions past a table, sizes out
of range) are mixed in on purpose: they must raise; a request that does not fit now (an exhausted
pool) must be declined. Either way the whole state must be exactly as it was.
"""

from __future__ import annotations

from collections import Counter

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_table import blocks_needed
from pagedkv_edu.core.request import Request
from pagedkv_edu.sim.contiguous import RESERVE_POLICIES, ContiguousArena, Extent, NoContiguousSpaceError, \
    reservation_size
from pagedkv_edu.sim.simulate import simulate
from pagedkv_edu.workload import Request as WorkloadRequest

MACHINE_SETTINGS = settings(max_examples=60, stateful_step_count=30, deadline=None,
                            suppress_health_check=[HealthCheck.too_slow])
SEQ_IDS = st.integers(0, 5)
LENGTHS = st.integers(0, 12) | st.integers(-2, 70)  # mostly small prompts, sometimes bad or too long
GROWTH = st.integers(0, 4) | st.integers(-2, 20)


def manager_state(m: BlockManager) -> tuple:
    """The whole observable state: free queue in order, reference counts, every table in order."""
    return (m.pool.free_ids(), list(m.pool.ref_counts),
            [(sid, list(t.block_ids), t.num_tokens) for sid, t in m.tables.items()])


def arena_state(a: ContiguousArena) -> tuple:
    return (a.extents, a.holes(), a.reserved, a.free)


class BlockManagerMachine(RuleBasedStateMachine):
    """Random admit / grow / release, with bad calls mixed in, against a model of token counts.

    The machine plays the scheduler: it appends a sequence's tokens to its record before
    asking room for them, and advances the record's count once room is granted.
    """

    @initialize(num_blocks=st.integers(1, 16), block_size=st.integers(1, 6),
                max_seq_len=st.none() | st.integers(1, 60))
    def build(self, num_blocks: int, block_size: int, max_seq_len: int | None) -> None:
        self.m = BlockManager(num_blocks, block_size, max_seq_len)
        self.tokens: dict[int, int] = {}      # the model: sequence holding memory -> tokens
        self.seqs: dict[int, Request] = {}    # their records

    def refused(self, call, errors: tuple[type[Exception], ...]) -> None:
        """``call`` must raise one of ``errors`` with a message, and change nothing."""
        before = manager_state(self.m)
        try:
            call()
        except errors as exc:
            assert str(exc)
        else:
            raise AssertionError("a bad call was accepted")
        assert manager_state(self.m) == before

    def declined(self, call) -> None:
        """``call`` must return None (no room now), and change nothing."""
        before = manager_state(self.m)
        assert call() is None, "a call that does not fit was granted"
        assert manager_state(self.m) == before

    def fits_ever(self, n: int) -> bool:
        """Within max_seq_len and the whole pool: anything else is refused by name."""
        return (n >= 0 and (self.m.max_seq_len is None or n <= self.m.max_seq_len)
                and n <= self.m.pool.capacity_tokens)

    def live(self, index: int) -> int:
        return sorted(self.tokens)[index % len(self.tokens)]

    def record(self, seq: int) -> Request:
        """The live sequence's record, or a fresh one (a sequence that holds nothing)."""
        return self.seqs[seq] if seq in self.seqs else Request(seq, None, num_prompt_tokens=1)

    # --- operations ------------------------------------------------------------------------
    # Sequence ids are drawn from 0..5, so some calls hit live sequences and some do not
    # (duplicate adds, unknown sequences, finishing twice). The *_live rules always pick a
    # live sequence, so that long histories of growth and exhaustion happen too.
    @rule(seq=SEQ_IDS, n=LENGTHS)
    def add(self, seq: int, n: int) -> None:
        if seq in self.tokens:
            self.refused(lambda: self.m.admit(self.seqs[seq], max(n, 0)), (KeyError,))
            return
        record = Request(seq, None, num_prompt_tokens=max(n, 1))
        if not self.fits_ever(n):
            self.refused(lambda: self.m.admit(record, n), (ValueError,))
            return
        if blocks_needed(n, self.m.block_size) > self.m.pool.num_free:
            self.declined(lambda: self.m.admit(record, n))
            return
        free_before = self.m.pool.free_ids()
        table = self.m.admit(record, n)
        # Blocks come from the front of the free queue, in order.
        assert table == free_before[:blocks_needed(n, self.m.block_size)]
        record.num_computed_tokens = n
        self.tokens[seq], self.seqs[seq] = n, record

    @rule(seq=SEQ_IDS, n=GROWTH)
    def append(self, seq: int, n: int) -> None:
        record = self.record(seq)
        if seq not in self.tokens:
            self.refused(lambda: self.m.grow(record, n), (KeyError,))
            return
        ids_before = self.m.block_ids(record)
        need = blocks_needed(self.tokens[seq] + n, self.m.block_size) - len(ids_before) if n >= 0 else 0
        if n >= 0:
            assert self.m.blocks_to_grow(record, n) == need
        record.output_token_ids += [0] * max(n, 0)      # the tokens it grows for, before it grows
        if n < 0 or not self.fits_ever(self.tokens[seq] + n):
            self.refused(lambda: self.m.grow(record, n), (ValueError,))
        elif need > self.m.pool.num_free:
            self.declined(lambda: self.m.grow(record, n))
        else:
            free_before = self.m.pool.free_ids()
            new = self.m.grow(record, n)
            assert new == free_before[:need]
            assert self.m.block_ids(record) == ids_before + new
            record.num_computed_tokens += n
            self.tokens[seq] += n
            return
        del record.output_token_ids[len(record.output_token_ids) - max(n, 0):]

    @precondition(lambda self: self.tokens)
    @rule(index=st.integers(0, 5), n=GROWTH)
    def append_live(self, index: int, n: int) -> None:
        self.append(self.live(index), n)

    @rule(seq=SEQ_IDS)
    def finish(self, seq: int) -> None:
        record = self.record(seq)
        if seq not in self.tokens:
            self.refused(lambda: self.m.release(record), (KeyError,))
            return
        ids = self.m.block_ids(record)
        free_before = self.m.pool.free_ids()
        assert self.m.release(record) == ids[::-1]  # tail first
        assert self.m.pool.free_ids() == free_before + ids[::-1]
        del self.tokens[seq], self.seqs[seq]
        self.refused(lambda: self.m.release(record), (KeyError,))  # and never twice

    @precondition(lambda self: self.tokens)
    @rule(index=st.integers(0, 5))
    def finish_live(self, index: int) -> None:
        self.finish(self.live(index))

    @rule(block_id=st.integers(-2, 20))
    def double_free(self, block_id: int) -> None:
        """Free a block the pool does not hold a reference for (free, out of range, or freed twice)."""
        pool = self.m.pool
        if 0 <= block_id < pool.num_blocks and pool.ref_counts[block_id] > 0:
            self.refused(lambda: pool.free_all([block_id, block_id]), (ValueError,))
        else:
            self.refused(lambda: pool.free(block_id), (ValueError, IndexError))

    @rule(seq=SEQ_IDS, extra=st.integers(0, 3))
    def slot_past_the_table(self, seq: int, extra: int) -> None:
        record = self.record(seq)
        if seq not in self.tokens:
            self.refused(lambda: self.m.table(record), (KeyError,))
            return
        n = self.tokens[seq]
        self.refused(lambda: self.m.table(record).slot_mapping(0, n + 1 + extra), (IndexError,))
        self.refused(lambda: self.m.table(record).slot(n + extra), (IndexError,))

    @precondition(lambda self: self.tokens)
    @rule(index=st.integers(0, 5), extra=st.integers(0, 3))
    def slot_past_a_live_table(self, index: int, extra: int) -> None:
        self.slot_past_the_table(self.live(index), extra)

    # --- invariants --------------------------------------------------------------------------
    @invariant()
    def blocks_are_free_xor_owned_once(self) -> None:
        pool, tables = self.m.pool, self.m.tables
        owned = Counter(b for t in tables.values() for b in t.block_ids)
        free = pool.free_ids()
        assert len(free) == len(set(free)), "a block sits twice in the free queue"
        assert all(count == 1 for count in owned.values()), "a block is owned twice"
        assert set(owned).isdisjoint(free), "a block is both free and owned"
        assert set(owned) | set(free) == set(range(pool.num_blocks)), "a block is neither free nor owned"
        assert pool.num_used + pool.num_free == pool.num_blocks
        assert pool.num_used == sum(owned.values())
        assert pool.ref_counts == [owned.get(b, 0) for b in range(pool.num_blocks)]

    @invariant()
    def tables_match_the_model(self) -> None:
        assert {sid: t.num_tokens for sid, t in self.m.tables.items()} == self.tokens
        assert self.m.sequences == [self.seqs[sid] for sid in self.m.tables]   # the records, in admission order
        bs = self.m.block_size
        for t in self.m.tables.values():
            assert len(t.block_ids) == blocks_needed(t.num_tokens, bs)
            assert 0 <= t.waste < bs or not t.block_ids
            assert sum(t.fills) == t.num_tokens
        usage = self.m.usage()
        assert usage.stored_tokens == sum(self.tokens.values())   # nothing is shared here
        assert usage.waste_slots == sum(t.waste for t in self.m.tables.values())
        assert usage.held_slots == self.m.pool.num_used * bs and usage.capacity == self.m.pool.capacity_tokens

    @invariant()
    def slot_mapping_is_a_bijection_onto_filled_owned_slots(self) -> None:
        bs = self.m.block_size
        seen: dict[int, tuple[int, int]] = {}
        for sid, t in self.m.tables.items():
            mapping = t.slot_mapping()
            assert len(mapping) == t.num_tokens
            for pos, slot in enumerate(mapping):
                assert slot not in seen, f"{(sid, pos)} and {seen[slot]} share slot {slot}"
                seen[slot] = (sid, pos)
                block, offset = divmod(slot, bs)
                assert block in t.block_ids, f"slot {slot} of {(sid, pos)} is in a block it does not own"
                assert offset < t.fills[t.block_ids.index(block)], f"slot {slot} is past the filled prefix"
        filled = {b * bs + o for t in self.m.tables.values() for b, f in zip(t.block_ids, t.fills) for o in range(f)}
        assert set(seen) == filled

    def teardown(self) -> None:
        if not hasattr(self, "m"):
            return
        for record in self.seqs.values():
            self.m.release(record)
        pool = self.m.pool
        assert self.m.tables == {}
        assert sorted(pool.free_ids()) == list(range(pool.num_blocks))
        assert pool.ref_counts == [0] * pool.num_blocks and pool.num_used == 0


TestBlockManager = BlockManagerMachine.TestCase
TestBlockManager.settings = MACHINE_SETTINGS


class ContiguousArenaMachine(RuleBasedStateMachine):
    """Random reservations and releases, first-fit checked against the holes before each call."""

    @initialize(capacity=st.integers(1, 64))
    def build(self, capacity: int) -> None:
        self.a = ContiguousArena(capacity)
        self.held: dict[int, int] = {}  # the model: owner -> size

    def refused(self, call, errors: tuple[type[Exception], ...]) -> None:
        before = arena_state(self.a)
        try:
            call()
        except errors as exc:
            assert str(exc)
        else:
            raise AssertionError("a bad call was accepted")
        assert arena_state(self.a) == before

    @rule(owner=st.integers(0, 7), size=st.integers(1, 12) | st.integers(-1, 70))
    def allocate(self, owner: int, size: int) -> None:
        holes = self.a.holes()
        first = next((start for start, hole in holes if hole >= size), None)
        if owner in self.held or not 0 < size <= self.a.capacity or first is None:
            self.refused(lambda: self.a.allocate(owner, size), (KeyError, ValueError, NoContiguousSpaceError))
            if owner not in self.held and 0 < size <= self.a.capacity:
                assert not self.a.fits(size) and self.a.largest_hole() < size
            return
        assert self.a.allocate(owner, size) == Extent(owner, first, size)  # the lowest hole that fits
        self.held[owner] = size

    @rule(owner=st.integers(0, 7))
    def release(self, owner: int) -> None:
        if owner not in self.held:
            self.refused(lambda: self.a.release(owner), (KeyError,))
            return
        extent = self.a.release(owner)
        assert extent.owner == owner and extent.size == self.held.pop(owner)

    @precondition(lambda self: self.held)
    @rule(index=st.integers(0, 7))
    def release_live(self, index: int) -> None:
        self.release(sorted(self.held)[index % len(self.held)])

    @invariant()
    def extents_and_holes_tile_the_arena(self) -> None:
        a = self.a
        extents = a.extents
        assert {e.owner: e.size for e in extents} == self.held
        assert a.reserved + a.free == a.capacity
        assert a.reserved == sum(self.held.values())
        pieces = sorted([(e.start, e.size, "x") for e in extents] + [(s, n, "h") for s, n in a.holes()])
        cursor = 0
        for start, size, _ in pieces:
            assert start == cursor and size > 0, f"gap or overlap at {cursor}: {pieces}"
            cursor = start + size
        assert cursor == a.capacity
        kinds = [k for _, _, k in pieces]
        assert all(not (x == y == "h") for x, y in zip(kinds, kinds[1:])), "two holes side by side"
        assert [e.start for e in extents] == sorted(e.start for e in extents)
        for k in (1, 4, 9, 33):
            assert a.stranded(k) == sum(n for _, n in a.holes() if n < k)

    def teardown(self) -> None:
        if hasattr(self, "a"):
            for owner in list(self.held):
                self.a.release(owner)
            assert self.a.holes() == [(0, self.a.capacity)] and self.a.reserved == 0


TestContiguousArena = ContiguousArenaMachine.TestCase
TestContiguousArena.settings = MACHINE_SETTINGS


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 8), min_size=1, max_size=16), tail=st.integers(0, 8),
       released=st.lists(st.booleans(), min_size=16, max_size=16), request=st.integers(1, 12))
def test_first_fit_takes_the_lowest_hole_that_fits(sizes, tail, released, request) -> None:
    """Fill an arena, release a random subset (many holes of many sizes), then reserve once more."""
    arena = ContiguousArena(sum(sizes) + tail)
    for owner, size in enumerate(sizes):
        arena.allocate(owner, size)
    for owner in range(len(sizes)):
        if released[owner]:
            arena.release(owner)
    lowest = next((start for start, hole in arena.holes() if hole >= request), None)
    if lowest is None:
        # Larger than the arena is bad input; larger than every hole is fragmentation.
        error = ValueError if request > arena.capacity else NoContiguousSpaceError
        before = arena_state(arena)
        try:
            arena.allocate("new", request)
        except error as exc:
            assert str(request) in str(exc)
        else:
            raise AssertionError("a reservation larger than every hole was placed")
        assert arena_state(arena) == before
    else:
        assert arena.allocate("new", request) == Extent("new", lowest, request)


# --- the simulator over random small workloads ---------------------------------------------------------
MAX_SEQ = 64
WORKLOADS = st.lists(st.tuples(st.integers(1, 40), st.integers(0, 20), st.integers(0, 15)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(workload=WORKLOADS, policy=st.sampled_from(["paged", "contiguous"]), block_size=st.integers(1, 8),
       reserve=st.sampled_from(RESERVE_POLICIES), spare=st.integers(0, 96), watermark=st.integers(0, 2))
def test_simulation_accounts_for_every_slot_and_finishes_every_request(workload, policy, block_size, reserve,
                                                                         spare, watermark) -> None:
    reqs = [WorkloadRequest(i, p, o, arrival) for i, (p, o, arrival) in enumerate(workload)]
    if policy == "paged":
        budget = max(blocks_needed(r.final_len, block_size) for r in reqs) * block_size + spare
    else:
        budget = max(reservation_size(r.prompt_len, r.output_len, MAX_SEQ, reserve) for r in reqs) + spare
    result = simulate(reqs, policy, budget, block_size=block_size, max_seq_len=MAX_SEQ, reserve=reserve,
                      watermark_blocks=watermark, max_steps=10_000)
    for rec, r in zip(sorted(result.requests, key=lambda x: x.request_id), reqs):
        assert rec.admit_step is not None and rec.finish_step is not None
        assert r.arrival_step <= rec.admit_step and rec.finish_step - rec.admit_step >= r.output_len - 1   # the engine's rule
    for s in result.steps:
        parts = (s.used, s.over_reserved, s.internal, s.external, s.free)
        assert min(parts) >= 0 and sum(parts) == result.capacity, s
        if policy == "paged":
            assert s.over_reserved == s.external == 0
            assert s.internal <= s.running * (block_size - 1)
    if policy == "contiguous" and reserve == "max" and budget % MAX_SEQ == 0:
        assert all(s.external == 0 for s in result.steps)
