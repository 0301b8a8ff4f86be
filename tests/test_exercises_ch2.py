"""Chapter 2's graders accept the solutions and reject the usual wrong answers, with a useful diff."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pagedkv_edu.block_pool import BlockPool
from pagedkv_edu.block_table import BlockTable
from pagedkv_edu.exercises.ch2 import APPEND_CASES, SLOT_CASES, check_append_token, check_slot_mapping
from pagedkv_edu.exercises.solutions.ch2 import append_token, slot_mapping


# --- the solutions agree with the package's BlockTable ------------------------------------
def test_slot_mapping_solution_matches_block_table() -> None:
    for case in SLOT_CASES:
        table = BlockTable(case.block_size, list(case.block_table), len(case.block_table) * case.block_size)
        assert slot_mapping(case.block_table, case.block_size, case.positions) == [
            table.slot(p) for p in case.positions]


def test_append_token_solution_matches_block_table() -> None:
    for case in APPEND_CASES:
        # The case's own blocks are busy in the pool; its free list is the pool's free queue.
        pool = BlockPool.from_free_order(case.num_blocks, case.block_size, list(case.free_blocks))
        table = BlockTable(case.block_size, list(case.block_table), case.num_tokens)
        mine, free = list(case.block_table), list(case.free_blocks)
        for i in range(case.appends):
            slot = append_token(mine, case.num_tokens + i, case.block_size, free)
            table.append_tokens(pool, 1)
            assert mine == table.block_ids and free == pool.free_ids()
            assert slot == table.slot(case.num_tokens + i)


# --- the checkers ---------------------------------------------------------------------------
def test_checkers_accept_the_solutions(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_slot_mapping(slot_mapping) is True
    assert check_append_token(append_token) is True
    out = capsys.readouterr().out
    assert "✓ slot_mapping: passed" in out and "✓ append_token: passed" in out


def _forgot_times_b(t: Sequence[int], b: int, ps: Sequence[int]) -> list[int]:
    return [t[p // b] + p % b for p in ps]


def _contiguous(t: Sequence[int], b: int, ps: Sequence[int]) -> list[int]:
    return list(ps)


def _swapped_div_mod(t: Sequence[int], b: int, ps: Sequence[int]) -> list[int]:
    return [t[p % b % len(t)] * b + p // b for p in ps]


def _off_by_one_block(t: Sequence[int], b: int, ps: Sequence[int]) -> list[int]:
    return [t[min(p // b + (p % b == b - 1), len(t) - 1)] * b + p % b for p in ps]


def _not_implemented(t: Sequence[int], b: int, ps: Sequence[int]) -> list[int]:
    raise NotImplementedError("your turn")


@pytest.mark.parametrize("broken", [_forgot_times_b, _contiguous, _swapped_div_mod, _off_by_one_block,
                                    _not_implemented])
def test_slot_checker_rejects_broken_variants(broken, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_slot_mapping(broken) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ slot_mapping: failed")


def test_slot_checker_diff_names_the_position_and_the_foreign_block(capsys: pytest.CaptureFixture[str]) -> None:
    check_slot_mapping(_forgot_times_b)
    out = capsys.readouterr().out
    # position 0 of the paged-KV-cache article case: expected 7*16 = 112, got 7, which is block 0: not this table's.
    assert "       0      112        7  lands in block 0 (offset 7), which this table [7, 3, 12] does not hold" in out
    assert "also wrong: the block-table article" in out


def test_slot_checker_names_out_of_range_block_ids(capsys: pytest.CaptureFixture[str]) -> None:
    check_slot_mapping(lambda t, b, ps: [(t[p // b] + 100) * b + p % b for p in ps])
    out = capsys.readouterr().out
    assert "block id 107 is out of range for a pool of 16 blocks" in out


def test_slot_checker_reports_wrong_lengths(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_slot_mapping(lambda t, b, ps: slot_mapping(t, b, ps)[:-1]) is False
    assert "expected 41 slots, got 40" in capsys.readouterr().out


def _allocates_one_token_early(t: list[int], n: int, b: int, free: list[int]) -> int:
    if not t or n % b == b - 1:
        t.append(free.pop(0))
    return t[-1] * b + n % b


def _takes_the_back_of_the_free_list(t: list[int], n: int, b: int, free: list[int]) -> int:
    if n % b == 0:
        t.append(free.pop())
    return t[-1] * b + n % b


def _does_not_remove_the_block(t: list[int], n: int, b: int, free: list[int]) -> int:
    if n % b == 0:
        t.append(free[0])
    return t[-1] * b + n % b


def _slot_without_times_b(t: list[int], n: int, b: int, free: list[int]) -> int:
    if n % b == 0:
        t.append(free.pop(0))
    return t[-1] + n % b


def _returns_slot_but_keeps_state(t: list[int], n: int, b: int, free: list[int]) -> int:
    t2, f2 = list(t), list(free)
    return append_token(t2, n, b, f2)


@pytest.mark.parametrize("broken", [_allocates_one_token_early, _takes_the_back_of_the_free_list,
                                    _does_not_remove_the_block, _slot_without_times_b,
                                    _returns_slot_but_keeps_state])
def test_append_checker_rejects_broken_variants(broken, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_append_token(broken) is False
    assert capsys.readouterr().out.startswith("✗ append_token: failed")


def test_append_checker_diff_shows_the_first_wrong_token(capsys: pytest.CaptureFixture[str]) -> None:
    check_append_token(_allocates_one_token_early)
    out = capsys.readouterr().out
    assert "token at position 7, starting from table [7, 1], free list [3, 0, 2, 4, 5, 6]:" in out
    assert "slot: expected 7, got 15" in out
    assert "block table: expected [7, 1], got [7, 1, 3]" in out
    assert "free list: expected [3, 0, 2, 4, 5, 6], got [0, 2, 4, 5, 6]" in out


def test_append_checker_names_blocks_it_should_not_have_taken(capsys: pytest.CaptureFixture[str]) -> None:
    def invents_a_block(t: list[int], n: int, b: int, free: list[int]) -> int:
        if n % b == 0:
            t.append(99)
        return t[-1] * b + n % b

    def steals_a_block(t: list[int], n: int, b: int, free: list[int]) -> int:
        if n % b == 0:
            t.append(5 if b == 16 and 5 not in t else free.pop(0))
        return t[-1] * b + n % b

    check_append_token(invents_a_block)
    assert "block ids [99] are out of range for a pool of 8 blocks" in capsys.readouterr().out
    check_append_token(steals_a_block)
    # block 5 is free in the block-table article case; in the paged-KV-cache article case it belongs to someone else.
    assert "block ids [5] were never free: another request holds them" in capsys.readouterr().out


def test_append_checker_reports_an_exception_once(capsys: pytest.CaptureFixture[str]) -> None:
    def not_yet(t: list[int], n: int, b: int, free: list[int]) -> int:
        raise NotImplementedError("your turn")

    assert check_append_token(not_yet) is False
    out = capsys.readouterr().out
    assert out.count("raised NotImplementedError: your turn") == 1
