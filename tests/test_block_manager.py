"""BlockManager: a pool plus one block table per live sequence; add, append, finish."""

from __future__ import annotations

import pytest

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_pool import BlockPool, OutOfBlocksError


def manager_state(m: BlockManager) -> tuple:
    """Everything a refused call must leave alone: free queue, reference counts, every table."""
    return (m.pool.free_ids(), list(m.pool.ref_counts),
            [(sid, list(t.block_ids), t.num_tokens) for sid, t in m.tables.items()])


@pytest.fixture
def busy() -> BlockManager:
    """8 blocks of 4 slots, two live sequences and a partly filled last block."""
    m = BlockManager(8, 4, max_seq_len=20)
    m.admit("a", 6)
    m.admit("b", 3)
    m.grow("a", 3)
    return m


def test_a_sequence_life_admit_grow_release() -> None:
    m = BlockManager(6, 4, max_seq_len=16)
    assert m.admit(0, 5) == 0
    table = m.table(0)
    assert table.block_ids == [0, 1] and table.fills == [4, 1]
    assert m.grow(0, 3) == []
    assert m.grow(0) == [2]
    assert m.slot_mapping(0) == list(range(9))
    assert (m.num_tokens, m.waste_slots, m.pool.num_used) == (9, 3, 3)
    assert m.release(0) == [2, 1, 0]
    assert m.tables == {} and m.pool.num_used == 0 and m.pool.free_ids() == [3, 4, 5, 2, 1, 0]


def test_seed_000_through_the_manager() -> None:
    m = BlockManager.over(BlockPool.from_free_order(13, 16, [7, 3, 12]), max_seq_len=2048)
    m.admit("consultant-1", 41)
    table = m.table("consultant-1")
    assert table.block_ids == [7, 3, 12] and table.fills == [16, 16, 9]
    assert m.grow("consultant-1") == []
    assert m.slot_mapping("consultant-1", 41, 42) == [12 * 16 + 9]
    assert m.release("consultant-1") == [12, 3, 7]


def test_seed_004_through_the_manager() -> None:
    m = BlockManager.over(BlockPool.from_free_order(8, 4, [7, 1, 3, 0, 2, 4, 5, 6]))
    m.admit("r", 7)
    assert m.block_ids("r") == [7, 1]
    assert m.grow("r") == [] and m.table("r").fills == [4, 4]
    assert m.grow("r") == [3] and m.table("r").block_ids == [7, 1, 3]


def test_the_scheduler_questions(busy: BlockManager) -> None:
    # a: 9 tokens in 3 blocks, b: 3 tokens in 1 block, 4 blocks free.
    assert busy.pool.num_free == 4
    assert busy.can_admit("c", 16) and not busy.can_admit("c", 17)
    busy.watermark_blocks = 1                    # one block kept free for the running ones to grow
    assert busy.can_admit("c", 12) and not busy.can_admit("c", 13)
    assert busy.can_grow("b", 1) and busy.can_grow("a", 3 + 16) and not busy.can_grow("a", 3 + 17)
    assert busy.can_admit("c", 0)


def test_waste_is_the_unfilled_tail_of_each_last_block(busy: BlockManager) -> None:
    assert busy.waste_slots == sum(t.waste for t in busy.tables.values()) == 3 + 1
    assert all(t.waste < busy.block_size for t in busy.tables.values())


def test_sequence_ids_may_be_any_hashable() -> None:
    m = BlockManager(4, 2)
    m.admit(("beam", 0), 3)
    m.admit(7, 1)
    assert m.table(("beam", 0)).block_ids == [0, 1] and m.table(7).block_ids == [2]


# --- bad input: a clear error naming the value, and no state change ----------------------------
def test_duplicate_sequence_id_is_refused(busy: BlockManager) -> None:
    before = manager_state(busy)
    with pytest.raises(KeyError, match="sequence 'a' is already live"):
        busy.admit("a", 1)
    assert manager_state(busy) == before


def test_a_request_longer_than_max_seq_len_is_refused(busy: BlockManager) -> None:
    before = manager_state(busy)
    with pytest.raises(ValueError, match="sequence 'c': 21 tokens exceed max_seq_len=20"):
        busy.admit("c", 21)
    with pytest.raises(ValueError, match="sequence 'a': 21 tokens exceed max_seq_len=20"):
        busy.grow("a", 12)  # 9 + 12
    assert manager_state(busy) == before
    busy.grow("a", 11)  # exactly max_seq_len is fine
    assert busy.table("a").num_tokens == 20


@pytest.mark.parametrize("seq_id", ["zzz", 0, None])
def test_unknown_sequences_are_refused_everywhere(busy: BlockManager, seq_id) -> None:
    before = manager_state(busy)
    calls = (busy.release, busy.grow, busy.table, busy.slot_mapping, busy.can_grow)
    for call in calls:
        with pytest.raises(KeyError, match=rf"unknown sequence {seq_id!r} \(never admitted, or already released\)"):
            call(seq_id)
        assert manager_state(busy) == before


def test_finishing_twice_is_refused(busy: BlockManager) -> None:
    busy.release("b")
    before = manager_state(busy)
    with pytest.raises(KeyError, match="unknown sequence 'b'"):
        busy.release("b")
    assert manager_state(busy) == before
    assert busy.pool.free_ids().count(busy.pool.free_ids()[-1]) == 1


def test_appending_when_the_pool_is_exhausted_changes_nothing(busy: BlockManager) -> None:
    busy.admit("c", 16)  # takes the last 4 blocks
    assert busy.pool.num_free == 0
    before = manager_state(busy)
    with pytest.raises(OutOfBlocksError, match="needs 1 new blocks; the pool has 0 free"):
        busy.grow("c")
    with pytest.raises(OutOfBlocksError):
        busy.admit("d", 1)
    assert manager_state(busy) == before and "d" not in busy.tables
    assert busy.grow("b") == []  # room left in b's last block is still usable


def test_adding_what_does_not_fit_now_changes_nothing(busy: BlockManager) -> None:
    before = manager_state(busy)
    with pytest.raises(OutOfBlocksError, match="appending 17 tokens needs 5 new blocks; the pool has 4 free"):
        busy.admit("c", 17)
    assert manager_state(busy) == before and "c" not in busy.tables


def test_a_sequence_larger_than_the_whole_pool_is_refused_by_name() -> None:
    m = BlockManager(4, 4)
    before = manager_state(m)
    with pytest.raises(OutOfBlocksError, match="sequence 's': 17 tokens need 5 blocks but the whole pool has 4"):
        m.admit("s", 17)
    assert manager_state(m) == before


@pytest.mark.parametrize("count", [-1, 2.5, None])
def test_bad_token_counts_are_refused_by_value(busy: BlockManager, count) -> None:
    before = manager_state(busy)
    with pytest.raises(ValueError, match=rf"token count must be a non-negative integer, got {count!r}"):
        busy.admit("c", count)
    assert manager_state(busy) == before and "c" not in busy.tables


@pytest.mark.parametrize("n", [-1, -9, 0.5])
def test_negative_or_fractional_appends_are_refused(busy: BlockManager, n) -> None:
    before = manager_state(busy)
    with pytest.raises(ValueError):
        busy.grow("a", n)
    assert manager_state(busy) == before


def test_slot_mapping_past_the_table_is_refused(busy: BlockManager) -> None:
    before = manager_state(busy)
    with pytest.raises(IndexError, match=r"range \[0, 10\) is outside the table's 9 tokens"):
        busy.slot_mapping("a", 0, 10)
    with pytest.raises(IndexError, match="position 9 is past the table"):
        busy.table("a").slot(9)
    assert manager_state(busy) == before


@pytest.mark.parametrize("kwargs, bad", [
    (dict(num_blocks=0, block_size=16), "num_blocks .* got 0"),
    (dict(num_blocks=-1, block_size=16), "num_blocks .* got -1"),
    (dict(num_blocks=4, block_size=0), "block_size .* got 0"),
    (dict(num_blocks=4, block_size=16, max_seq_len=0), "max_seq_len .* got 0"),
    (dict(num_blocks=4, block_size=16, max_seq_len=-5), "max_seq_len .* got -5"),
    (dict(num_blocks=4, block_size=16, max_seq_len=2.5), "max_seq_len .* got 2.5"),
])
def test_bad_sizes_are_refused(kwargs, bad) -> None:
    with pytest.raises(ValueError, match=bad):
        BlockManager(**kwargs)


def test_pools_and_managers_display_as_pictures_once_the_views_register_a_formatter() -> None:
    """The memory layer imports no view; ``setup()`` has ``viz`` register the picture with IPython."""
    from types import SimpleNamespace

    from IPython.core.formatters import DisplayFormatter

    from pagedkv_edu.viz import register_formatters

    shell = SimpleNamespace(display_formatter=DisplayFormatter())
    m = BlockManager(4, 4)
    m.admit("a", 5)
    assert "image/svg+xml" not in shell.display_formatter.format(m)[0]
    assert register_formatters(shell)
    for obj in (m, m.pool):
        svg = shell.display_formatter.format(obj)[0]["image/svg+xml"]
        assert svg.startswith("<svg") and "<rect" in svg
    assert not hasattr(m, "_repr_mimebundle_") and not hasattr(m.pool, "_repr_mimebundle_")
