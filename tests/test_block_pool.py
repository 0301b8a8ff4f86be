"""BlockPool: a fixed set of physical blocks, a FIFO free queue and reference counts."""

from __future__ import annotations

import re

import pytest

from pagedkv_edu.block_pool import BlockPool, OutOfBlocksError


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
