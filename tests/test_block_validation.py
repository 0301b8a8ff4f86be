"""Every memory-layer method checks all of its input before it changes anything.

Each refused call below is made against a busy manager (prefix caching on, shared prompt
blocks, a fork, a queued copy-on-write), and the whole state, pool, tables, cache entries
and statistics, must be exactly what it was before the call.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_pool import MAX_NUM_BLOCKS, BlockPool, OutOfBlocksError
from pagedkv_edu.core.block_table import BlockTable, blocks_needed
from pagedkv_edu.checks import check_token_ids, check_whole
from pagedkv_edu.core.prefix_cache import PrefixCache
from pagedkv_edu.core.request import Request

REFUSED = (ValueError, KeyError, IndexError, OutOfBlocksError)
BAD_TOKENS = ["x", None, 2**70, -1, 1.0, True, [1], 2**63]
BAD_COUNTS = [-1, 1.5, "2", None, True, False, 2**70 * -1]


class Busy(NamedTuple):
    """The busy manager and the records of its sequences (the refused calls name them)."""

    m: BlockManager
    a: Request
    b: Request
    a2: Request


def busy_manager() -> Busy:
    """Two requests sharing a cached 8-token prefix, one of them forked, a copy-on-write queued."""
    m = BlockManager(12, 4, enable_prefix_caching=True)
    a = admitted(m, "a", list(range(10)))
    b = admitted(m, "b", list(range(8)) + [99])
    a2 = a.fork("a2", 1)
    a2.num_computed_tokens = a.num_computed_tokens
    m.fork(a, a2)
    a2.output_token_ids.append(0)
    assert m.grow(a2, 1) is not None               # shared partial last block: copy queued
    a2.num_computed_tokens += 1
    return Busy(m, a, b, a2)


def admitted(m: BlockManager, seq_id: str, tokens: list) -> Request:
    """A new record for ``tokens``, looked up and admitted whole; its count advanced once granted."""
    seq = Request(seq_id, tokens)
    hit = m.lookup(seq)
    if m.admit(seq, len(tokens) - hit.num_tokens, hit) is not None:
        seq.num_computed_tokens = len(tokens)
    return seq


def state(m: BlockManager) -> tuple:
    cache = m.prefix_cache
    return (m.pool.free_ids(), list(m.pool.ref_counts),
            {s: (list(t.block_ids), t.num_tokens) for s, t in m.tables.items()},
            copy.deepcopy(m.copies),
            [cache.holds(b) for b in range(m.pool.num_blocks)] if cache else None,
            (cache.queried_tokens, cache.hit_tokens, cache.num_evictions) if cache else None)


def assert_refused(m: BlockManager, call: Callable[[BlockManager], object]) -> None:
    before = state(m)
    with pytest.raises(REFUSED):
        call(m)
    assert state(m) == before


@pytest.mark.parametrize("bad", BAD_TOKENS)
@pytest.mark.parametrize("where", [0, 3, 5])    # first block, a full block, the partial last block
def test_a_bad_token_id_anywhere_refuses_the_admission_before_it_is_live(bad, where) -> None:
    """Making the record, looking it up or admitting it: one of them refuses, and nothing moves."""
    m = busy_manager().m
    tokens: list = [0, 1, 2, 3, 4, 5, 6]                 # blocks of 4: one full block, then 3 tokens
    tokens[where] = bad
    assert_refused(m, lambda m: admitted(m, "c", tokens))
    assert "c" not in m.tables
    assert_refused(m, lambda m: m.lookup(Request("c", tokens)))


def test_the_issue_case_is_refused_with_nothing_live() -> None:
    m = BlockManager(8, 4, enable_prefix_caching=True)
    before = state(m)
    with pytest.raises(ValueError, match=r"token_ids\[7\].*'x'"):
        admitted(m, "c", [1, 2, 3, 4, 5, 6, 7, "x"])
    assert state(m) == before and not m.tables and m.prefix_cache.num_cached_blocks == 0


@pytest.mark.parametrize("caching", [False, True])
@pytest.mark.parametrize("bad", [None, 2**70, "x"])
def test_bad_ids_in_a_partial_last_block_are_refused(caching, bad) -> None:
    m = BlockManager(8, 4, enable_prefix_caching=caching)
    with pytest.raises(ValueError, match=r"token_ids\[5\]"):
        admitted(m, "c", [1, 2, 3, 4, 5, bad])
    assert not m.tables and m.pool.num_free == 8


@pytest.mark.parametrize("bad", BAD_COUNTS)
def test_bad_counts_are_refused_by_every_method(bad) -> None:
    m, a, _, _ = busy_manager()
    assert_refused(m, lambda m: m.grow(a, bad))
    assert_refused(m, lambda m: m.blocks_to_grow(a, bad))
    assert_refused(m, lambda m: m.admit(Request("c", [1, 2, 3, 4]), bad))
    assert_refused(m, lambda m: m.pool.allocate(bad))
    assert_refused(m, lambda m: m.table(a).append_tokens(m.pool, bad))


@pytest.mark.parametrize("watermark", [-1, 0.5, 1.0, "1", None, True])
def test_a_watermark_is_a_non_negative_whole_number_of_blocks(watermark) -> None:
    with pytest.raises(ValueError, match="watermark_blocks"):
        BlockManager(12, 4, watermark_blocks=watermark)


def test_other_refusals_change_nothing() -> None:
    m, a, b, _ = busy_manager()
    assert_refused(m, lambda m: m.admit(a, 4))                         # holds blocks already
    assert_refused(m, lambda m: m.admit(Request("c", [1, 2, 3]), 4))   # more tokens than the record has
    assert_refused(m, lambda m: admitted(m, "c", "abcd"))              # a string is not ids
    assert_refused(m, lambda m: admitted(m, "c", 1234))
    assert_refused(m, lambda m: m.admit(Request("c", None, num_prompt_tokens=49), 49))   # more than the pool
    nobody = Request("nobody", [1, 2, 3, 4])
    assert_refused(m, lambda m: m.grow(nobody, 1))
    assert_refused(m, lambda m: m.fork(nobody, Request("c", [1])))
    assert_refused(m, lambda m: m.fork(a, b))                          # b holds blocks already
    assert_refused(m, lambda m: m.grow(a, 1))                          # a token its record does not have
    assert_refused(m, lambda m: m.release(nobody))
    assert_refused(m, lambda m: m.table(a).slot_mapping(0, 11))
    assert_refused(m, lambda m: m.table(a).slot_mapping(True, 3))
    assert_refused(m, lambda m: m.pool.free_all([0, 0, 0, 0, 0]))
    assert_refused(m, lambda m: m.pool.touch(True))
    assert_refused(m, lambda m: m.pool.free(12))
    assert_refused(m, lambda m: m.prefix_cache.chain([1, None, 3]))


def test_a_bad_output_id_in_a_block_it_fills_is_refused() -> None:
    """A grow that fills a block offers it to the cache: its new tokens are read, so they are checked first."""
    m, a, _, _ = busy_manager()
    a.output_token_ids += [None, 0]                   # 12 tokens: a's last block becomes full
    assert_refused(m, lambda m: m.grow(a, 2))


def test_a_hash_function_that_raises_changes_nothing() -> None:
    def refuse_second_block(parent: bytes, tokens) -> bytes:
        if parent:
            raise ValueError("this hash function refuses any block after the first")
        return bytes(tokens)

    m = BlockManager(8, 4, enable_prefix_caching=True, hash_fn=refuse_second_block)
    assert_refused(m, lambda m: admitted(m, "c", list(range(9))))    # fails in the lookup
    assert_refused(m, lambda m: admitted(m, "c", list(range(8))))    # fails at admission: the lookup's cap skipped it


@pytest.mark.parametrize("bad", [True, False, 0, -3, 2.0, "16", None])
def test_sizes_are_whole_positive_numbers_and_a_bool_is_not_one(bad) -> None:
    with pytest.raises(ValueError, match="block_size"):
        BlockPool(4, bad)
    with pytest.raises(ValueError, match="num_blocks"):
        BlockPool(bad, 4)
    with pytest.raises(ValueError, match="block_size"):
        BlockTable(bad)
    with pytest.raises(ValueError, match="block_size"):
        BlockManager(4, bad)
    if bad is not None:
        with pytest.raises(ValueError, match="max_seq_len"):
            BlockManager(4, 4, bad)


def test_absurd_pools_are_refused_before_anything_is_allocated() -> None:
    with pytest.raises(ValueError, match=r"num_blocks must be a whole number in 1\.\.2097152"):
        BlockPool(10**12 // 16, 16)
    assert BlockPool(MAX_NUM_BLOCKS, 1).num_free == MAX_NUM_BLOCKS


def test_block_tables_refuse_ids_that_are_not_block_ids() -> None:
    for ids in ([True], [-1], ["0"], [1.0]):
        with pytest.raises(ValueError, match="block ids"):
            BlockTable(4, ids, 3)
    with pytest.raises(ValueError, match="num_tokens"):
        blocks_needed(True, 4)


def test_a_prefix_cache_needs_a_hash_function() -> None:
    with pytest.raises(ValueError, match="hash_fn"):
        PrefixCache(BlockPool(4, 4), hash_fn="sha256")


def test_checks_name_the_argument_and_shorten_huge_values() -> None:
    with pytest.raises(ValueError, match="tokens must be a whole number >= 1, got an integer of 1329 bits"):
        check_whole("tokens", -(10**400), 1)
    with pytest.raises(ValueError, match=r"ids\[1\]"):
        check_token_ids([1, 10**400], "ids")
    numpy = pytest.importorskip("numpy")
    assert check_token_ids(numpy.arange(3)) == [0, 1, 2] and type(check_token_ids(numpy.arange(1))[0]) is int


@settings(max_examples=60, deadline=None)
@given(prompt=st.lists(st.integers(0, 50), min_size=1, max_size=20), where=st.data(),
       bad=st.sampled_from(BAD_TOKENS), caching=st.booleans())
def test_any_bad_id_anywhere_changes_nothing(prompt, where, bad, caching) -> None:
    """Property: with or without caching, one bad id at any position is refused and nothing moves.

    With caching, a sequence growing over a bad output id into a block it fills is refused too
    (without caching the manager never reads the ids it grows for).
    """
    m = BlockManager(12, 4, enable_prefix_caching=caching)
    a = admitted(m, "a", list(range(9)))
    i = where.draw(st.integers(0, len(prompt) - 1))
    tokens = prompt[:i] + [bad] + prompt[i + 1:]
    assert_refused(m, lambda m: admitted(m, "c", tokens))
    assert_refused(m, lambda m: m.lookup(Request("c", tokens)))
    if caching:
        outputs = [0, 0, 0]
        outputs[i % 3] = bad
        a.output_token_ids += outputs                # 12 tokens: a's last block becomes full
        assert_refused(m, lambda m: m.grow(a, 3))
