"""BlockTable: logical-to-physical entries, fills, slot mapping, and the articles' walk-throughs."""

from __future__ import annotations

import re

import pytest

from pagedkv_edu.core.block_pool import BlockPool, OutOfBlocksError
from pagedkv_edu.core.block_table import BlockTable, blocks_needed

SEED_004_FREE_ORDER = [7, 1, 3, 0, 2, 4, 5, 6]


def state(table: BlockTable, pool: BlockPool) -> tuple:
    """A refused call must leave the table and the pool exactly like this."""
    return (list(table.block_ids), table.num_tokens, pool.free_ids(), list(pool.ref_counts))


def test_blocks_needed_is_a_ceiling_division() -> None:
    assert blocks_needed(825, 16) == 52  # the seed's ceil(825 / 16)
    assert [blocks_needed(n, 4) for n in range(10)] == [0, 1, 1, 1, 1, 2, 2, 2, 2, 3]
    with pytest.raises(ValueError, match="got -1"):
        blocks_needed(-1, 16)


def test_the_825_token_request_takes_52_blocks_and_wastes_7_slots() -> None:
    pool = BlockPool(64, 16)
    table = BlockTable(16)
    new = table.append_tokens(pool, 825)
    assert len(new) == len(table.block_ids) == 52
    assert table.capacity == 832 and table.waste == 7
    assert table.fills == [16] * 51 + [825 % 16]
    assert table.waste / table.capacity < 0.01  # the seed's "under 1%"


def test_seed_000_walk_through() -> None:
    """41 tokens at block size 16 from a pool whose free queue is [7, 3, 12]."""
    pool = BlockPool.from_free_order(13, 16, [7, 3, 12])
    table = BlockTable(16)
    assert table.append_tokens(pool, 41) == [7, 3, 12]
    assert table.block_ids == [7, 3, 12] and table.fills == [16, 16, 9]
    assert table.rows() == [(0, 7, 16), (1, 3, 16), (2, 12, 9)]
    assert str(table).splitlines() == ["logical  physical  filled",
                                       "      0         7   16 / 16",
                                       "      1         3   16 / 16",
                                       "      2        12    9 / 16"]
    # Token 41 is written into the 10th position (offset 9) of block 12, allocating nothing.
    assert table.append_tokens(pool, 1) == []
    assert table.slot(41) == 12 * 16 + 9
    assert table.fills == [16, 16, 10]
    # Token 47 fills block 12; the next one needs a new block, and this pool has none left.
    assert table.append_tokens(pool, 6) == [] and table.fills == [16, 16, 16]
    before = state(table, pool)
    with pytest.raises(OutOfBlocksError, match="needs 1 new blocks; the pool has 0 free"):
        table.append_tokens(pool, 1)
    assert state(table, pool) == before
    # Finishing returns all three blocks at once, tail first.
    assert table.release(pool) == [12, 3, 7]
    assert pool.free_ids() == [12, 3, 7] and table.block_ids == [] and table.num_tokens == 0


def test_seed_004_walk_through() -> None:
    """7 tokens at block size 4 -> [7, 1]; token 8 fills block 1; token 9 takes block 3."""
    pool = BlockPool.from_free_order(8, 4, SEED_004_FREE_ORDER)
    table = BlockTable(4)
    assert table.append_tokens(pool, 7) == [7, 1]
    assert table.block_ids == [7, 1] and table.fills == [4, 3]
    assert table.append_tokens(pool, 1) == []
    assert table.block_ids == [7, 1] and table.fills == [4, 4]
    assert table.append_tokens(pool, 1) == [3]
    assert table.block_ids == [7, 1, 3] and table.fills == [4, 4, 1]
    assert table.slot_mapping() == [28, 29, 30, 31, 4, 5, 6, 7, 12]


def test_slot_mapping_follows_the_formula() -> None:
    pool = BlockPool.from_free_order(10, 3, [9, 2, 5, 0, 7])
    table = BlockTable(3)
    table.append_tokens(pool, 13)
    ids, b = table.block_ids, table.block_size
    assert table.slot_mapping() == [ids[p // b] * b + p % b for p in range(13)]
    assert table.slot_mapping(4, 9) == table.slot_mapping()[4:9]
    assert table.slot_mapping(13, 13) == []


def test_a_block_is_allocated_only_when_the_last_one_is_full() -> None:
    pool = BlockPool(10, 4)
    table = BlockTable(4)
    allocated = [len(table.append_tokens(pool, 1)) for _ in range(12)]
    assert allocated == [1, 0, 0, 0] * 3
    assert table.blocks_to_append(0) == 0 and table.blocks_to_append(1) == 1 and table.blocks_to_append(5) == 2


@pytest.mark.parametrize("position", [41, 42, -1, 1.0, None])
def test_slot_for_a_position_past_the_table_is_refused(position) -> None:
    pool = BlockPool.from_free_order(13, 16, [7, 3, 12])
    table = BlockTable(16)
    table.append_tokens(pool, 41)
    before = state(table, pool)
    with pytest.raises(IndexError, match=rf"position {position!r} is past the table: it holds 41 tokens"):
        table.slot(position)
    assert state(table, pool) == before


@pytest.mark.parametrize("start, end", [(0, 42), (-1, 3), (5, 3), (42, 42)])
def test_slot_mapping_for_a_range_past_the_table_is_refused(start, end) -> None:
    pool = BlockPool(8, 16)
    table = BlockTable(16)
    table.append_tokens(pool, 41)
    before = state(table, pool)
    with pytest.raises(IndexError, match=rf"\[{start}, {end}\) is outside the table's 41 tokens"):
        table.slot_mapping(start, end)
    assert state(table, pool) == before


def test_appending_when_the_pool_is_exhausted_changes_nothing() -> None:
    pool = BlockPool(3, 4)
    table = BlockTable(4)
    table.append_tokens(pool, 5)
    before = state(table, pool)
    with pytest.raises(OutOfBlocksError, match="appending 8 tokens needs 2 new blocks; the pool has 1 free"):
        table.append_tokens(pool, 8)
    assert state(table, pool) == before
    assert table.append_tokens(pool, 7) == [2]  # what does fit still fits


@pytest.mark.parametrize("n", [-1, 1.5, None])
def test_appending_a_bad_count_is_refused_by_value(n) -> None:
    pool = BlockPool(3, 4)
    table = BlockTable(4)
    table.append_tokens(pool, 2)
    before = state(table, pool)
    with pytest.raises(ValueError, match=re.escape(f"n (tokens to append) must be a whole number >= 0, got {n!r}")):
        table.append_tokens(pool, n)
    assert state(table, pool) == before


def test_a_pool_with_another_block_size_is_refused() -> None:
    pool = BlockPool(3, 8)
    table = BlockTable(4)
    before = state(table, pool)
    with pytest.raises(ValueError, match="pool block_size 8 != table block_size 4"):
        table.append_tokens(pool, 1)
    assert state(table, pool) == before


@pytest.mark.parametrize("kwargs, bad", [
    (dict(block_size=0), "block_size must be a whole number >= 1, got 0"),
    (dict(block_size=-4), "got -4"),
    (dict(block_size=4, block_ids=[1], num_tokens=5), "5 tokens need 2 blocks of 4, but the table has 1"),
    (dict(block_size=4, block_ids=[1, 2], num_tokens=0), "0 tokens need 0 blocks"),
    (dict(block_size=4, num_tokens=-1), "num_tokens must be a whole number >= 0, got -1"),
])
def test_inconsistent_tables_are_refused(kwargs, bad) -> None:
    with pytest.raises(ValueError, match=bad):
        BlockTable(**kwargs)


def test_an_empty_table_has_no_blocks_fills_or_waste() -> None:
    table = BlockTable(16)
    assert (table.capacity, table.fills, table.waste, table.rows(), table.slot_mapping()) == (0, [], 0, [], [])
    pool = BlockPool(2, 16)
    assert table.append_tokens(pool, 0) == [] and pool.num_free == 2
    assert table.release(pool) == [] and pool.num_free == 2
