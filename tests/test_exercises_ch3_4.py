"""Chapters 3-4 graders accept the solutions and reject the usual wrong answers, with a useful diff."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from pagedkv_edu.attention import gather_kv as package_gather_kv
from pagedkv_edu.exercises.ch3_4 import (
    GATHER_CASES,
    SOFTMAX_CASES,
    check_gather_kv,
    check_online_softmax_update,
    initial_state,
    slot_numbered_cache,
    softmax_case_data,
)
from pagedkv_edu.exercises.solutions.ch3_4 import gather_kv, online_softmax_update


# --- the solutions are right -------------------------------------------------------------------
def test_gather_solution_matches_the_package() -> None:
    for case in GATHER_CASES:
        cache = slot_numbered_cache(case.num_blocks, case.block_size)
        assert torch.equal(gather_kv(cache, case.block_table, case.seq_len),
                           package_gather_kv(cache, case.block_table, case.seq_len))


def test_online_softmax_solution_equals_softmax() -> None:
    for case in SOFTMAX_CASES:
        scores, values = softmax_case_data(case)
        m, l, acc = initial_state(scores[0].shape[0], values[0].shape[1])
        for s, v in zip(scores, values):
            m, l, acc = online_softmax_update(m, l, acc, s, v)
        expected = torch.softmax(torch.cat(scores, dim=1), dim=1) @ torch.cat(values)
        torch.testing.assert_close(acc / l[:, None], expected, rtol=1e-12, atol=1e-12)


# --- gather: accepted and rejected -------------------------------------------------------------
def test_checkers_accept_the_solutions(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_gather_kv(gather_kv) is True
    assert check_online_softmax_update(online_softmax_update) is True
    out = capsys.readouterr().out
    assert "✓ gather_kv: passed" in out and "✓ online_softmax_update: passed" in out


def _ignores_table(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    return cache.reshape(-1, *cache.shape[2:])[:n]


def _whole_blocks(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    used = -(-n // cache.shape[1])
    return torch.cat([cache[b] for b in table[:used]])


def _swapped_div_mod(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    b = cache.shape[1]
    slots = [table[(p % b) % len(table)] * b + p // b for p in range(n)]
    return cache.reshape(-1, *cache.shape[2:])[slots]


def _sorted_table(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    return gather_kv(cache, sorted(t for t in table if t >= 0), n)


def _not_implemented(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    raise NotImplementedError("your turn")


@pytest.mark.parametrize("broken", [_ignores_table, _whole_blocks, _swapped_div_mod, _sorted_table,
                                    _not_implemented])
def test_gather_checker_rejects_broken_variants(broken, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_gather_kv(broken) is False
    assert capsys.readouterr().out.startswith("✗ gather_kv: failed")


def test_gather_checker_says_where_a_wrong_row_came_from(capsys: pytest.CaptureFixture[str]) -> None:
    check_gather_kv(_ignores_table)
    out = capsys.readouterr().out
    # Seed 004, position 0: expected slot 28 (block 7), got slot 0 (block 0, not this sequence's).
    assert "position 0: expected slot 28 (block 7, offset 0), got slot 0 (block 0, offset 0, " \
           "a block this sequence does not own)" in out
    check_gather_kv(_whole_blocks)
    assert "expected shape (9, 2, 3), got (12, 2, 3)" in capsys.readouterr().out


# --- online softmax: accepted and rejected --------------------------------------------------------
def _no_acc_rescale(m, l, acc, s, v):
    m_new = torch.maximum(m, s.max(1).values)
    p = torch.exp(s - m_new[:, None])
    return m_new, l * torch.exp(m - m_new) + p.sum(1), acc + p @ v


def _no_sum_rescale(m, l, acc, s, v):
    m_new = torch.maximum(m, s.max(1).values)
    alpha = torch.exp(m - m_new)
    p = torch.exp(s - m_new[:, None])
    return m_new, l + p.sum(1), acc * alpha[:, None] + p @ v


def _no_running_max(m, l, acc, s, v):
    """Mathematically a softmax (sums of exp(score)), numerically not: overflows near 1,000."""
    zero = torch.zeros_like(m)
    p = torch.exp(s)
    return zero, l + p.sum(1), acc + p @ v


def _old_max_in_exp(m, l, acc, s, v):
    m_new = torch.maximum(m, s.max(1).values)
    alpha = torch.exp(m - m_new)
    p = torch.exp(s - torch.where(torch.isinf(m), m_new, m)[:, None])
    return m_new, l * alpha + p.sum(1), acc * alpha[:, None] + p @ v


def _not_implemented_update(m, l, acc, s, v):
    raise NotImplementedError("your turn")


@pytest.mark.parametrize("broken", [_no_acc_rescale, _no_sum_rescale, _no_running_max, _old_max_in_exp,
                                    _not_implemented_update])
def test_softmax_checker_rejects_broken_variants(broken, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_online_softmax_update(broken) is False
    assert capsys.readouterr().out.startswith("✗ online_softmax_update: failed")


def test_softmax_checker_names_tile_and_quantity(capsys: pytest.CaptureFixture[str]) -> None:
    check_online_softmax_update(_no_acc_rescale)
    out = capsys.readouterr().out
    assert "random scores, four tiles of 8: after tile 2 of 4:" in out
    assert "acc (running output): head 1: expected" in out and "m (running max)" not in out
    check_online_softmax_update(_no_running_max)
    assert "m (running max): expected" in capsys.readouterr().out
