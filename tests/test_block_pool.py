"""BlockPool: a fixed set of physical blocks, a free queue (FIFO, or vLLM v1's order with a prefix cache) and reference counts."""

from __future__ import annotations

import re

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from pagedkv_edu.core.block_pool import BlockPool, OutOfBlocksError


def pool_state(pool: BlockPool) -> tuple:
    """Everything a refused call must leave alone: free queue in order and every reference count."""
    return (pool.free_ids(), list(pool.ref_counts), pool.num_free, pool.num_used)


def test_a_new_pool_is_all_free_in_id_order() -> None:
    pool = BlockPool(8, 16)
    assert pool.free_ids() == list(range(8))
    assert pool.ref_counts == [0] * 8
    assert (pool.num_free, pool.num_used, pool.usage, pool.capacity_tokens) == (8, 0, 0.0, 128)
    assert all(pool.is_free(b) for b in range(8))


def test_allocate_takes_from_the_front_and_free_returns_to_the_back() -> None:
    pool = BlockPool(6, 4)
    assert pool.allocate(2) == [0, 1]
    assert pool.allocate() == [2]
    assert pool.ref_counts == [1, 1, 1, 0, 0, 0]
    assert pool.free(1) is True
    assert pool.free_ids() == [3, 4, 5, 1]
    assert pool.allocate(3) == [3, 4, 5]
    assert (pool.num_used, pool.num_free, pool.usage) == (5, 1, 5 / 6)
    assert not pool.is_free(4) and pool.is_free(1)


def test_allocate_zero_blocks_is_a_no_op() -> None:
    pool = BlockPool(3, 4)
    before = pool_state(pool)
    assert pool.allocate(0) == []
    assert pool_state(pool) == before


def test_allocating_more_than_is_free_allocates_nothing() -> None:
    pool = BlockPool(4, 4)
    pool.allocate(3)
    before = pool_state(pool)
    with pytest.raises(OutOfBlocksError, match="asked for 2 blocks but only 1 of 4 are free"):
        pool.allocate(2)
    assert pool_state(pool) == before


@pytest.mark.parametrize("n", [-1, 1.5, "2", None])
def test_allocate_refuses_a_bad_count_by_value(n) -> None:
    pool = BlockPool(4, 4)
    before = pool_state(pool)
    with pytest.raises(ValueError, match=re.escape(f"n (blocks to allocate) must be a whole number >= 0, got {n!r}")):
        pool.allocate(n)
    assert pool_state(pool) == before


def test_double_free_is_refused_and_changes_nothing() -> None:
    pool = BlockPool(4, 4)
    a, b = pool.allocate(2)
    pool.free(a)
    before = pool_state(pool)
    with pytest.raises(ValueError, match=f"block {a} is already free"):
        pool.free(a)
    with pytest.raises(ValueError, match="block 3 is already free"):
        pool.free(3)  # never allocated
    assert pool_state(pool) == before
    assert pool.free_ids().count(a) == 1


@pytest.mark.parametrize("block_id", [-1, 4, 100, 1.0, "0", None])
def test_out_of_range_block_ids_are_refused_everywhere(block_id) -> None:
    pool = BlockPool(4, 4)
    pool.allocate(2)
    before = pool_state(pool)
    for call in (pool.free, pool.incref, pool.is_free, lambda b: pool.free_all([0, b])):
        with pytest.raises(IndexError, match=f"block id {block_id!r} is out of range for a pool of 4 blocks"):
            call(block_id)
        assert pool_state(pool) == before


def test_reference_counts_keep_a_shared_block_until_its_last_reference_drops() -> None:
    pool = BlockPool(3, 4)
    (b,) = pool.allocate()
    pool.incref(b)
    pool.incref(b)
    assert pool.ref_counts[b] == 3
    assert pool.free(b) is False and pool.free(b) is False
    assert b not in pool.free_ids()
    assert pool.free(b) is True
    assert pool.free_ids()[-1] == b and pool.ref_counts[b] == 0


def test_incref_of_a_free_block_is_refused() -> None:
    pool = BlockPool(3, 4)
    before = pool_state(pool)
    with pytest.raises(ValueError, match="block 2 is free"):
        pool.incref(2)
    assert pool_state(pool) == before


def test_free_all_checks_every_id_before_freeing_any() -> None:
    pool = BlockPool(5, 4)
    ids = pool.allocate(3)
    before = pool_state(pool)
    with pytest.raises(ValueError, match=f"block {ids[1]} would be freed more times than it is referenced"):
        pool.free_all([ids[0], ids[1], ids[1]])
    with pytest.raises(ValueError, match="block 4 would be freed more times"):
        pool.free_all([ids[0], 4])
    assert pool_state(pool) == before
    pool.free_all(reversed(ids))
    assert pool.free_ids() == [3, 4, *reversed(ids)]
    assert pool.num_used == 0


@pytest.mark.parametrize("num_blocks, block_size, bad", [
    (0, 16, "num_blocks .* got 0"), (-2, 16, "num_blocks .* got -2"), (3.0, 16, "num_blocks .* got 3.0"),
    (4, 0, "block_size .* got 0"), (4, -16, "block_size .* got -16"), (4, 2.5, "block_size .* got 2.5"),
])
def test_a_pool_too_small_for_one_block_or_with_bad_sizes_is_refused(num_blocks, block_size, bad) -> None:
    with pytest.raises(ValueError, match=bad):
        BlockPool(num_blocks, block_size)


def test_from_free_order_builds_a_busy_pool_with_exactly_that_free_queue() -> None:
    pool = BlockPool.from_free_order(13, 16, [7, 3, 12])
    assert pool.free_ids() == [7, 3, 12]
    assert pool.num_used == 10
    assert [b for b in range(13) if pool.ref_counts[b] == 0] == [3, 7, 12]
    assert all(pool.ref_counts[b] == 1 for b in range(13) if b not in (3, 7, 12))
    assert pool.allocate(3) == [7, 3, 12]


@pytest.mark.parametrize("order, exc, bad", [
    ([7, 3, 7], ValueError, r"repeated block ids: \[7, 3, 7\]"),
    ([1, 13], IndexError, "block id 13 is out of range"),
    ([-1], IndexError, "block id -1 is out of range"),
])
def test_from_free_order_refuses_bad_orders(order, exc, bad) -> None:
    with pytest.raises(exc, match=bad):
        BlockPool.from_free_order(13, 16, order)


def test_repr_shows_usage() -> None:
    pool = BlockPool(4, 8)
    pool.allocate(3)
    assert repr(pool) == "BlockPool(num_blocks=4, block_size=8, used=3, free=1)"


# --- the free-queue order with a prefix cache (vLLM v1 at c59cb79, BlockPool.free_blocks) -------------
def test_with_a_cache_uncached_blocks_go_to_the_front_in_order_and_cached_ones_to_the_back() -> None:
    pool = BlockPool(8, 4)
    cached = {2, 4}
    pool.is_cached = cached.__contains__
    ids = pool.allocate(6)                                   # 0..5; 6, 7 stay free
    pool.free_all(reversed(ids))                             # tail first: 5, 4, 3, 2, 1, 0
    assert pool.free_ids() == [5, 3, 1, 0, 6, 7, 4, 2]
    assert pool.allocate(4) == [5, 3, 1, 0]                  # uncached first: the cached 4 and 2 are kept longest
    pool.free(3)
    assert pool.free_ids()[0] == 3                           # a single free follows the same rule
    pool.touch(4)                                            # a hit pulls a cached block out of the middle
    assert pool.free_ids() == [3, 6, 7, 2] and pool.ref_counts[4] == 1


def test_the_older_order_appends_both_and_no_cache_means_first_in_first_out() -> None:
    for pool in (BlockPool(8, 4, free_order="append"), BlockPool(8, 4)):
        if pool.free_order == "append":
            pool.is_cached = {2, 4}.__contains__
        ids = pool.allocate(6)
        pool.free_all(reversed(ids))
        assert pool.free_ids() == [6, 7, 5, 4, 3, 2, 1, 0]


def test_a_bad_free_order_is_refused() -> None:
    with pytest.raises(ValueError, match="free_order must be one of .*got 'lifo'"):
        BlockPool(4, 4, free_order="lifo")


class FreeOrderMachine(RuleBasedStateMachine):
    """Random allocate / share / free / touch with a changing set of cached blocks, against a list model."""

    @initialize(num_blocks=st.integers(1, 12), order=st.sampled_from(["vllm-v1", "append"]))
    def build(self, num_blocks: int, order: str) -> None:
        self.pool = BlockPool(num_blocks, 3, free_order=order)
        self.cached: set[int] = set()
        self.pool.is_cached = self.cached.__contains__
        self.queue = list(range(num_blocks))               # the model
        self.refs = [0] * num_blocks

    def _enqueue(self, freed: list[int]) -> None:
        fresh = [b for b in freed if b not in self.cached] if self.pool.free_order == "vllm-v1" else []
        self.queue = fresh + self.queue + [b for b in freed if b not in fresh]

    @rule(n=st.integers(0, 4))
    def allocate(self, n: int) -> None:
        if n > len(self.queue):
            with pytest.raises(OutOfBlocksError):
                self.pool.allocate(n)
            return
        got = self.pool.allocate(n)
        assert got == self.queue[:n]
        self.queue = self.queue[n:]
        for b in got:
            self.refs[b] = 1

    @rule(data=st.data())
    def free_some(self, data: st.DataObject) -> None:
        held = [b for b, r in enumerate(self.refs) for _ in range(r)]
        if not held:
            return
        chosen = data.draw(st.lists(st.sampled_from(held), max_size=4))
        if any(chosen.count(b) > self.refs[b] for b in chosen):
            return
        self.pool.free_all(chosen)
        freed = []
        for b in chosen:
            self.refs[b] -= 1
            freed += [b] if self.refs[b] == 0 else []
        self._enqueue(freed)

    @rule(data=st.data())
    def share_or_touch(self, data: st.DataObject) -> None:
        b = data.draw(st.integers(0, len(self.refs) - 1))
        self.pool.touch(b)
        if self.refs[b] == 0:
            self.queue.remove(b)
        self.refs[b] += 1

    @rule(data=st.data())
    def cache_or_forget(self, data: st.DataObject) -> None:
        self.cached ^= {data.draw(st.integers(0, len(self.refs) - 1))}

    @invariant()
    def matches_the_model(self) -> None:
        assert self.pool.free_ids() == self.queue
        assert self.pool.ref_counts == self.refs
        assert sorted(self.pool.free_ids()) == [b for b, r in enumerate(self.refs) if r == 0]


TestFreeOrderMachine = FreeOrderMachine.TestCase
TestFreeOrderMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
