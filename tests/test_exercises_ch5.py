"""Chapter 5's grader accepts the solution, agrees with the package, and rejects the usual bugs."""

from __future__ import annotations

import pytest
import torch

from pagedkv_edu.block_table import BlockTable
from pagedkv_edu.exercises.ch5 import STEP_CASES, check_step_layout
from pagedkv_edu.exercises.solutions.ch5 import step_layout
from pagedkv_edu.model.kv_store import StepMetadata


def test_solution_matches_the_decoders_step_metadata() -> None:
    for case in STEP_CASES:
        tables = [BlockTable(case.block_size, list(t), n) for t, n in zip(case.block_tables, case.seq_lens)]
        meta = StepMetadata.build(list(range(len(tables))), case.seq_lens, case.query_lens, torch.device("cpu"), tables)
        positions, slots, last = step_layout(case.block_tables, case.seq_lens, case.query_lens, case.block_size)
        assert meta.positions.tolist() == positions
        assert meta.slot_mapping.tolist() == slots
        assert meta.last_token_index.tolist() == last


def test_checker_accepts_the_solution(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_step_layout(step_layout) is True
    assert "✓ step_layout: passed" in capsys.readouterr().out


def _positions_from_zero(tables, seq_lens, query_lens, b):
    """Forgets the cached prefix: every sequence's new tokens start at position 0."""
    pos, slots, last = [], [], []
    for t, q in zip(tables, query_lens):
        for p in range(q):
            pos.append(p)
            slots.append(t[p // b] * b + p % b)
        last.append(len(pos) - 1)
    return pos, slots, last


def _logical_block(tables, seq_lens, query_lens, b):
    """Uses the logical block number as if it were the physical one."""
    pos, slots, last = step_layout(tables, seq_lens, query_lens, b)
    return pos, [p for p in pos], last


def _first_token_logits(tables, seq_lens, query_lens, b):
    """Takes each sequence's first new token for the logits."""
    pos, slots, _ = step_layout(tables, seq_lens, query_lens, b)
    starts, total = [], 0
    for q in query_lens:
        starts.append(total)
        total += q
    return pos, slots, starts


def _decode_off_by_one(tables, seq_lens, query_lens, b):
    """Writes the new token one slot too far (seq_len instead of seq_len - 1)."""
    pos, slots, last = [], [], []
    for t, s, q in zip(tables, seq_lens, query_lens):
        for p in range(s - q + 1, s + 1):
            pos.append(p)
            blk = t[p // b] if p // b < len(t) else -1
            slots.append(blk * b + p % b)
        last.append(len(pos) - 1)
    return pos, slots, last


def _raises(tables, seq_lens, query_lens, b):
    raise NotImplementedError("your turn")


@pytest.mark.parametrize("broken, shown", [
    (_positions_from_zero, "tokens wrong"),
    (_logical_block, "is not in this sequence's table"),
    (_first_token_logits, "last_token_index expected"),
    (_decode_off_by_one, "tokens wrong"),
    (_raises, "raised NotImplementedError"),
])
def test_checker_rejects_broken_variants(broken, shown, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_step_layout(broken) is False
    out = capsys.readouterr().out
    assert "✗ step_layout: failed" in out and shown in out
