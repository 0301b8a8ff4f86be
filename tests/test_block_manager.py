"""BlockManager: a pool plus one block table per sequence holding memory; admit, grow, release."""

from __future__ import annotations

from collections.abc import Hashable

import pytest

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_pool import BlockPool
from pagedkv_edu.core.request import Request


def manager_state(m: BlockManager) -> tuple:
    """Everything a refused call must leave alone: free queue, reference counts, every table."""
    return (m.pool.free_ids(), list(m.pool.ref_counts),
            [(sid, list(t.block_ids), t.num_tokens) for sid, t in m.tables.items()])


def record(seq_id: Hashable, num_tokens: int) -> Request:
    """A memory-only sequence of ``num_tokens`` prompt tokens."""
    return Request(seq_id, None, num_prompt_tokens=num_tokens)


def admit(m: BlockManager, seq: Request, n: int) -> list[int] | None:
    """Admit ``n`` tokens of ``seq`` and, once granted, count them computed (the scheduler's part)."""
    ids = m.admit(seq, n)
    if ids is not None:
        seq.num_computed_tokens += n
    return ids


def grow(m: BlockManager, seq: Request, n: int = 1) -> list[int] | None:
    """Give ``seq`` ``n`` more tokens, make room for them and, once granted, count them computed."""
    seq.output_token_ids += [0] * n
    ids = m.grow(seq, n)
    if ids is not None:
        seq.num_computed_tokens += n
    return ids


@pytest.fixture
def busy() -> tuple[BlockManager, Request, Request]:
    """8 blocks of 4 slots, two sequences holding memory and a partly filled last block."""
    m = BlockManager(8, 4, max_seq_len=20)
    a, b = record("a", 6), record("b", 3)
    admit(m, a, 6)
    admit(m, b, 3)
    grow(m, a, 3)
    return m, a, b


def test_a_sequence_life_admit_grow_release() -> None:
    m = BlockManager(6, 4, max_seq_len=16)
    seq = record(0, 5)
    assert admit(m, seq, 5) == [0, 1]                     # the whole table
    table = m.table(seq)
    assert table.block_ids == [0, 1] and table.fills == [4, 1]
    assert grow(m, seq, 3) == []
    assert grow(m, seq) == [2]
    assert m.table(seq).slot_mapping() == list(range(9))
    usage = m.usage()
    assert (usage.stored_tokens, usage.waste_slots, m.pool.num_used) == (9, 3, 3)
    assert m.release(seq) == [2, 1, 0]
    assert m.tables == {} and m.pool.num_used == 0 and m.pool.free_ids() == [3, 4, 5, 2, 1, 0]


def test_seed_000_through_the_manager() -> None:
    m = BlockManager.over(BlockPool.from_free_order(13, 16, [7, 3, 12]), max_seq_len=2048)
    seq = record("consultant-1", 41)
    admit(m, seq, 41)
    table = m.table(seq)
    assert table.block_ids == [7, 3, 12] and table.fills == [16, 16, 9]
    assert grow(m, seq) == []
    assert m.table(seq).slot_mapping(41, 42) == [12 * 16 + 9]
    assert m.release(seq) == [12, 3, 7]


def test_seed_004_through_the_manager() -> None:
    m = BlockManager.over(BlockPool.from_free_order(8, 4, [7, 1, 3, 0, 2, 4, 5, 6]))
    seq = record("r", 7)
    admit(m, seq, 7)
    assert m.block_ids(seq) == [7, 1]
    assert grow(m, seq) == [] and m.table(seq).fills == [4, 4]
    assert grow(m, seq) == [3] and m.table(seq).block_ids == [7, 1, 3]


def admits_now(m: BlockManager, n: int) -> bool:
    """Would a new sequence of ``n`` tokens be admitted now? Asked by admitting it and giving its blocks back."""
    before = manager_state(m)
    seq = record("c", max(n, 1))
    ids = m.admit(seq, n)
    if ids is None:
        assert manager_state(m) == before        # a refusal changes nothing
        return False
    assert len(ids) == -(-n // m.block_size)
    m.release(seq)
    return True


def test_the_scheduler_questions(busy: tuple[BlockManager, Request, Request]) -> None:
    m, a, b = busy
    # a: 9 tokens in 3 blocks, b: 3 tokens in 1 block, 4 blocks free.
    assert m.pool.num_free == 4
    assert admits_now(m, 16) and not admits_now(m, 17)
    m.watermark_blocks = 1                       # one block kept free for the running ones to grow
    assert admits_now(m, 12) and not admits_now(m, 13)
    assert m.blocks_to_grow(a, 3 + 16) == 4 == m.pool.num_free and m.blocks_to_grow(a, 3 + 17) == 5
    assert admits_now(m, 0)
    assert grow(m, b, 1) == []                   # growing ignores the watermark: it is kept for this


def test_waste_is_the_unfilled_tail_of_each_last_block(busy: tuple[BlockManager, Request, Request]) -> None:
    m, _, _ = busy
    assert m.usage().waste_slots == sum(t.waste for t in m.tables.values()) == 3 + 1
    assert all(t.waste < m.block_size for t in m.tables.values())


def test_sequence_ids_may_be_any_hashable() -> None:
    m = BlockManager(4, 2)
    beam, seven = record(("beam", 0), 3), record(7, 1)
    admit(m, beam, 3)
    admit(m, seven, 1)
    assert m.table(beam).block_ids == [0, 1] and m.table(seven).block_ids == [2]
    assert list(m.tables) == [("beam", 0), 7] and m.sequences == [beam, seven]


# --- bad input: a clear error naming the value, and no state change ----------------------------
def test_admitting_a_sequence_that_holds_blocks_is_refused(busy: tuple[BlockManager, Request, Request]) -> None:
    m, a, _ = busy
    before = manager_state(m)
    with pytest.raises(KeyError, match="sequence 'a' holds blocks already"):
        m.admit(a, 1)
    assert manager_state(m) == before


def test_a_request_longer_than_max_seq_len_is_refused(busy: tuple[BlockManager, Request, Request]) -> None:
    m, a, _ = busy
    before = manager_state(m)
    with pytest.raises(ValueError, match=r"sequence 'c': 21 tokens can never be held \(max_seq_len=20"):
        m.admit(record("c", 21), 21)
    a.output_token_ids += [0] * 12
    with pytest.raises(ValueError, match=r"sequence 'a': 21 tokens can never be held \(max_seq_len=20"):
        m.grow(a, 12)  # 9 + 12
    assert manager_state(m) == before
    assert m.grow(a, 11) == [4, 5]  # exactly max_seq_len is fine
    a.num_computed_tokens += 11
    assert m.table(a).num_tokens == 20


@pytest.mark.parametrize("seq_id", ["zzz", 0, None])
def test_unknown_sequences_are_refused_everywhere(busy: tuple[BlockManager, Request, Request], seq_id) -> None:
    m, _, _ = busy
    before = manager_state(m)
    unknown = record(seq_id, 4)
    calls = (m.release, lambda s: m.grow(s, 1), m.table, m.block_ids, m.ref_count_of, lambda s: m.blocks_to_grow(s, 1),
             lambda s: m.fork(s, record("child", 4)), m.swap_out)
    for call in calls:
        with pytest.raises(KeyError, match=rf"sequence {seq_id!r} holds no blocks \(never admitted, or already released"):
            call(unknown)
        assert manager_state(m) == before
    assert unknown not in m


def test_finishing_twice_is_refused(busy: tuple[BlockManager, Request, Request]) -> None:
    m, _, b = busy
    m.release(b)
    before = manager_state(m)
    with pytest.raises(KeyError, match="sequence 'b' holds no blocks"):
        m.release(b)
    assert manager_state(m) == before
    assert m.pool.free_ids().count(m.pool.free_ids()[-1]) == 1


def test_appending_when_the_pool_is_exhausted_changes_nothing(busy: tuple[BlockManager, Request, Request]) -> None:
    m, _, b = busy
    c = record("c", 16)
    admit(m, c, 16)  # takes the last 4 blocks
    assert m.pool.num_free == 0
    before = manager_state(m)
    assert m.blocks_to_grow(c, 1) == 1 and grow(m, c) is None        # needs 1 new block; the pool has 0 free
    d = record("d", 1)
    assert m.admit(d, 1) is None
    assert manager_state(m) == before and d not in m
    assert grow(m, b) == []  # room left in b's last block is still usable


def test_adding_what_does_not_fit_now_changes_nothing(busy: tuple[BlockManager, Request, Request]) -> None:
    m, _, _ = busy
    before = manager_state(m)
    c = record("c", 17)
    assert m.admit(c, 17) is None                # 17 tokens need 5 new blocks; the pool has 4 free
    assert manager_state(m) == before and c not in m


def test_a_sequence_larger_than_the_whole_pool_is_refused_by_name() -> None:
    m = BlockManager(4, 4)
    before = manager_state(m)
    with pytest.raises(ValueError, match=r"sequence 's': 17 tokens can never be held \(max_seq_len=None, 4 blocks of 4"):
        m.admit(record("s", 17), 17)
    assert manager_state(m) == before


@pytest.mark.parametrize("count", [-1, 2.5, None])
def test_bad_token_counts_are_refused_by_value(busy: tuple[BlockManager, Request, Request], count) -> None:
    m, _, _ = busy
    before = manager_state(m)
    c = record("c", 4)
    with pytest.raises(ValueError, match=rf"sequence 'c': the new tokens must be a whole number >= 0, got {count!r}"):
        m.admit(c, count)
    assert manager_state(m) == before and c not in m


def test_tokens_the_record_does_not_have_are_refused(busy: tuple[BlockManager, Request, Request]) -> None:
    """Room is made only for tokens on the record: its outputs are appended before it grows for them."""
    m, a, _ = busy
    before = manager_state(m)
    with pytest.raises(ValueError, match=r"sequence 'a' has 9 tokens; 9 \+ 1 would be tokens it does not have"):
        m.grow(a, 1)
    with pytest.raises(ValueError, match=r"sequence 'c' has 4 tokens; 0 \+ 5"):
        m.admit(record("c", 4), 5)
    assert manager_state(m) == before


def test_a_count_changed_without_its_memory_is_refused(busy: tuple[BlockManager, Request, Request]) -> None:
    m, a, _ = busy
    before = manager_state(m)
    a.output_token_ids += [0] * 5
    a.num_computed_tokens += 4                   # advanced past its blocks, without a grant
    with pytest.raises(ValueError, match="the count changed without its memory"):
        m.grow(a, 1)
    a.num_computed_tokens -= 4
    assert manager_state(m) == before


@pytest.mark.parametrize("n", [-1, -9, 0.5])
def test_negative_or_fractional_appends_are_refused(busy: tuple[BlockManager, Request, Request], n) -> None:
    m, a, _ = busy
    before = manager_state(m)
    with pytest.raises(ValueError):
        m.grow(a, n)
    assert manager_state(m) == before


def test_slot_mapping_past_the_table_is_refused(busy: tuple[BlockManager, Request, Request]) -> None:
    m, a, _ = busy
    before = manager_state(m)
    with pytest.raises(IndexError, match=r"range \[0, 10\) is outside the table's 9 tokens"):
        m.table(a).slot_mapping(0, 10)
    with pytest.raises(IndexError, match="position 9 is past the table"):
        m.table(a).slot(9)
    assert manager_state(m) == before


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
    admit(m, record("a", 5), 5)
    assert "image/svg+xml" not in shell.display_formatter.format(m)[0]
    assert register_formatters(shell)
    for obj in (m, m.pool):
        svg = shell.display_formatter.format(obj)[0]["image/svg+xml"]
        assert svg.startswith("<svg") and "<rect" in svg
    assert not hasattr(m, "_repr_mimebundle_") and not hasattr(m.pool, "_repr_mimebundle_")
