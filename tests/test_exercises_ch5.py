"""Chapter 5's grader accepts right answers in any style, agrees with the package, and rejects the usual bugs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pagedkv_edu.exercises.ch5 import HIDDEN_STEP_CASES, STEP_CASES, check_step_layout
from pagedkv_edu.exercises.solutions.ch5 import step_layout
from pagedkv_edu.attention.kv_cache import StepMetadata
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

B = 16   # the notebook-wide block size a solution may use by mistake


def test_solution_matches_the_decoders_step_metadata() -> None:
    for case in STEP_CASES + tuple(HIDDEN_STEP_CASES[:40]):
        meta = StepMetadata.build(list(range(len(case.block_tables))), case.seq_lens, case.query_lens, "cpu",
                                  case.block_tables, case.block_size)
        positions, slots, last = step_layout(case.block_tables, case.seq_lens, case.query_lens, case.block_size)
        assert meta.positions.tolist() == positions
        assert meta.slot_mapping.tolist() == slots
        assert meta.last_token_index.tolist() == last


def test_hidden_cases_cover_the_edges() -> None:
    assert {3, 5, 6, 12} <= {c.block_size for c in HIDDEN_STEP_CASES}
    lens = [(s, q, c.block_size) for c in HIDDEN_STEP_CASES for s, q in zip(c.seq_lens, c.query_lens)]
    assert any(s == 1 for s, _, _ in lens) and any(s % b == 0 for s, _, b in lens)
    assert any(q == 1 < s for s, q, _ in lens) and any(q == s > 1 for s, q, _ in lens) and any(1 < q < s for s, q, _ in lens)


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
    return pos, list(pos), last


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


def _global_b(tables, seq_lens, query_lens, b):
    return step_layout(tables, seq_lens, query_lens, B)


def _bit_trick(tables, seq_lens, query_lens, b):
    """The offset as p & (B - 1): right only for powers of two."""
    pos, slots, last = step_layout(tables, seq_lens, query_lens, b)
    return pos, [tables[i][p // b] * b + (p & (b - 1))
                 for i, q in enumerate(query_lens) for p in range(seq_lens[i] - q, seq_lens[i])], last


_KEY = {(c.block_tables, c.seq_lens, c.query_lens, c.block_size):
        step_layout(c.block_tables, c.seq_lens, c.query_lens, c.block_size) for c in STEP_CASES}


def _answer_key(tables, seq_lens, query_lens, b):
    hit = _KEY.get((tuple(map(tuple, tables)), tuple(seq_lens), tuple(query_lens), b))
    return hit if hit is not None else _positions_from_zero(tables, seq_lens, query_lens, b)


def _raises(tables, seq_lens, query_lens, b):
    raise NotImplementedError("your turn")


WRONG = {
    "positions from zero": (_positions_from_zero, "tokens wrong"),
    "logical block": (_logical_block, "is not in this sequence's table"),
    "first token's logits": (_first_token_logits, "last_token_index expected"),
    "decode off by one": (_decode_off_by_one, "tokens wrong"),
    "global B = 16": (_global_b, "these are the slots block size 16 would give, but the block size here is 4"),
    "bit trick": (_bit_trick, "only when B is a power of two"),
    "answer key": (_answer_key, "hidden case"),
    "float slots": (lambda *a: (a[1], torch.tensor(step_layout(*a)[1], dtype=torch.float64), [0]),
                    "got a tensor of dtype torch.float64"),
}


def _numpy(tables, seq_lens, query_lens, b):
    pos = np.concatenate([np.arange(s - q, s) for s, q in zip(seq_lens, query_lens)])
    table_of = np.concatenate([np.full(q, i) for i, q in enumerate(query_lens)])
    blocks = np.array([tables[i][p // b] for i, p in zip(table_of, pos)], dtype=np.int64)
    return pos, blocks * b + pos % b, np.cumsum(query_lens) - 1


def _torch(tables, seq_lens, query_lens, b):
    pos = torch.cat([torch.arange(s - q, s) for s, q in zip(seq_lens, query_lens)])
    block_ids = torch.cat([torch.tensor(t, dtype=torch.long)[torch.arange(s - q, s) // b]
                           for t, s, q in zip(tables, seq_lens, query_lens)])
    return pos, block_ids * b + pos % b, torch.tensor(query_lens).cumsum(0) - 1


def _divmod_loop(tables, seq_lens, query_lens, b):
    positions, slots, last = [], [], []
    for table, s, q in zip(tables, seq_lens, query_lens):
        p = s - q
        while p < s:
            block, offset = divmod(p, b)
            positions.append(p)
            slots.append(table[block] * b + offset)
            p += 1
        last.append(len(slots) - 1)
    return tuple(positions), tuple(slots), tuple(last)


RIGHT = {"reference": step_layout, "numpy": _numpy, "torch": _torch, "divmod loop": _divmod_loop}


@pytest.mark.parametrize("name", RIGHT)
def test_checker_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_step_layout(RIGHT[name]) is True
    assert "✓ step_layout（一步的批次排列）: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", WRONG)
def test_checker_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    broken, shown = WRONG[name]
    assert check_step_layout(broken) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ step_layout（一步的批次排列）: failed") and shown in out


def test_checker_stub(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_step_layout(_raises) is False
    out = capsys.readouterr().out
    assert out.startswith("○ step_layout（一步的批次排列）: not solved yet") and "decode" not in out


# --- in zh-TW -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [*WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_checker_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = {**{k: fn for k, (fn, _) in WRONG.items()}, "raises": lambda *a: 1 / 0, "stub": _raises}[name]
    assert check_step_layout(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith(("✗ step_layout（一步的批次排列）：未通過", "○ step_layout（一步的批次排列）：尚未作答")), out
    assert untranslated(out) == []


@pytest.mark.usefixtures("zh_tw")
def test_the_wrong_slots_are_placed_in_zh_tw(capsys: pytest.CaptureFixture[str]) -> None:
    check_step_layout(_logical_block)
    out = capsys.readouterr().out
    assert "區塊 4 不在這條序列的區塊表 [3, 12, 0, 5, 9] 裡" in out and "你給的槽位落在哪裡" in out, out
