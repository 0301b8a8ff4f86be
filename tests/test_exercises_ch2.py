"""Chapter 2's graders accept right answers in any style, reject the usual wrong ones, and say why."""

from __future__ import annotations

import importlib
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from pagedkv_edu.core.block_pool import BlockPool
from pagedkv_edu.core.block_table import BlockTable
from pagedkv_edu.core.prefix_cache import NO_HIT
from pagedkv_edu.exercises.ch2 import (
    APPEND_CASES,
    HIDDEN_APPEND_CASES,
    HIDDEN_RUNS,
    HIDDEN_SLOT_CASES,
    MANAGER_BLOCK_SIZES,
    MANAGER_CASES,
    SLOT_CASES,
    check_append_token,
    check_block_manager,
    check_slot_mapping,
    run_hidden,
    try_block_manager,
)
from pagedkv_edu.exercises.my_engine import load_parts, why_not_passed
from pagedkv_edu.exercises.solutions import block_manager as solution_manager
from pagedkv_edu.exercises.solutions.ch2 import append_token, slot_mapping
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

B = 16   # the notebook's global block size, which a solution may use by mistake


# --- the solution agrees with the package's BlockTable, on the hidden cases too -------------------
def test_slot_mapping_solution_matches_block_table() -> None:
    for case in SLOT_CASES + tuple(HIDDEN_SLOT_CASES):
        table = BlockTable(case.block_size, list(case.block_table), len(case.block_table) * case.block_size)
        assert slot_mapping(case.block_table, case.block_size, case.positions) == [
            table.slot(p) for p in case.positions]


def test_append_token_solution_matches_block_table() -> None:
    for case in APPEND_CASES + tuple(HIDDEN_APPEND_CASES[:30]):
        # The case's own blocks are busy in the pool; its free list is the pool's free queue.
        pool = BlockPool.from_free_order(case.num_blocks, case.block_size, list(case.free_blocks))
        table = BlockTable(case.block_size, list(case.block_table), case.num_tokens)
        mine, free = list(case.block_table), list(case.free_blocks)
        for i in range(case.appends):
            slot = append_token(mine, case.num_tokens + i, case.block_size, free)
            table.append_tokens(pool, 1)
            assert mine == table.block_ids and free == pool.free_ids()
            assert slot == table.slot(case.num_tokens + i)


def test_hidden_cases_cover_the_edges() -> None:
    sizes = {c.block_size for c in HIDDEN_SLOT_CASES}
    assert {3, 5, 6, 12} <= sizes
    lengths = {len(c.positions) for c in HIDDEN_SLOT_CASES}
    assert {0, 1} <= lengths
    assert any(len(c.positions) == len(c.block_table) * c.block_size > 0 for c in HIDDEN_SLOT_CASES)
    assert {3, 5, 6, 12} <= {c.block_size for c in HIDDEN_APPEND_CASES}
    assert any(c.num_tokens == 0 for c in HIDDEN_APPEND_CASES)
    assert any(c.num_tokens > 0 and c.num_tokens % c.block_size == 0 for c in HIDDEN_APPEND_CASES)


# --- slot_mapping ---------------------------------------------------------------------------------
_SLOT_KEY = {(c.block_table, c.block_size, c.positions): slot_mapping(c.block_table, c.block_size, c.positions)
             for c in SLOT_CASES}


def _slot_answer_key(t: Sequence[int], b: int, ps: Sequence[int]) -> list[int]:
    return _SLOT_KEY.get((tuple(t), b, tuple(ps)), list(ps))


def _slot_bit_trick(t: Sequence[int], b: int, ps: Sequence[int]) -> list[int]:
    s = b.bit_length() - 1
    return [(t[p >> s] << s) | (p & (b - 1)) for p in ps]


SLOT_WRONG = {
    "forgot * B": lambda t, b, ps: [t[p // b] + p % b for p in ps],
    "contiguous": lambda t, b, ps: list(ps),
    "swapped div and mod": lambda t, b, ps: [t[p % b % len(t)] * b + p // b for p in ps],
    "off by one block": lambda t, b, ps: [t[min(p // b + (p % b == b - 1), len(t) - 1)] * b + p % b for p in ps],
    "global B = 16": lambda t, b, ps: [t[p // B] * B + p % B for p in ps],
    "bit trick": _slot_bit_trick,
    "mask for mod": lambda t, b, ps: [t[p // b] * b + (p & (b - 1)) for p in ps],
    "answer key": _slot_answer_key,
    "float tensor": lambda t, b, ps: torch.tensor(slot_mapping(t, b, ps), dtype=torch.float32),
    "one short": lambda t, b, ps: slot_mapping(t, b, ps)[:-1],
}


def _slot_numpy(t: Sequence[int], b: int, ps: Sequence[int]) -> np.ndarray:
    p = np.asarray(ps, dtype=np.int64)
    return np.asarray(t, dtype=np.int64)[p // b] * b + p % b


def _slot_torch(t: Sequence[int], b: int, ps: Sequence[int]) -> torch.Tensor:
    p = torch.tensor(ps, dtype=torch.long)
    return torch.tensor(t, dtype=torch.long)[torch.div(p, b, rounding_mode="floor")] * b + p % b


def _slot_divmod_loop(t: Sequence[int], b: int, ps: Sequence[int]) -> list[int]:
    out = []
    for p in ps:
        block, offset = divmod(p, b)
        out.append(t[block] * b + offset)
    return out


SLOT_RIGHT = {"reference": slot_mapping, "numpy": _slot_numpy, "torch": _slot_torch, "divmod loop": _slot_divmod_loop,
              "whole floats": lambda t, b, ps: [float(s) for s in slot_mapping(t, b, ps)]}


@pytest.mark.parametrize("name", SLOT_RIGHT)
def test_slot_checker_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_slot_mapping(SLOT_RIGHT[name]) is True
    assert "✓ slot_mapping（槽位映射）: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", SLOT_WRONG)
def test_slot_checker_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_slot_mapping(SLOT_WRONG[name]) is False
    assert capsys.readouterr().out.startswith("✗ slot_mapping（槽位映射）: failed")


def test_slot_checker_diff_names_the_position_and_the_foreign_block(capsys: pytest.CaptureFixture[str]) -> None:
    check_slot_mapping(lambda t, b, ps: [(t[p // b] + 3) * b + p % b for p in ps])
    out = capsys.readouterr().out
    # position 0 of the paged-KV-cache article: expected 7*16 = 112, got 10*16 = 160, block 10: not this table's.
    assert "       0      112      160  lands in block 10 (offset 0), which this table [7, 3, 12] does not hold" in out
    assert "also wrong: \"the block-table article" in out


def test_slot_checker_blames_the_block_size(capsys: pytest.CaptureFixture[str]) -> None:
    check_slot_mapping(SLOT_WRONG["global B = 16"])
    out = capsys.readouterr().out
    assert "these are the slots block size 16 would give, but the block size here is 4" in out
    assert "out of range" not in out
    check_slot_mapping(_slot_bit_trick)
    out = capsys.readouterr().out
    assert "hidden case" in out and "block size here is 10, not a power of two" in out
    check_slot_mapping(SLOT_WRONG["mask for mod"])
    assert "equal p // B, p % B and * B only when B is a power of two" in capsys.readouterr().out
    check_slot_mapping(SLOT_WRONG["forgot * B"])
    assert "must be multiplied by the block size" in capsys.readouterr().out


def test_slot_checker_names_the_dtype_and_wrong_lengths(capsys: pytest.CaptureFixture[str]) -> None:
    check_slot_mapping(SLOT_WRONG["float tensor"])
    assert "got a tensor of dtype torch.float32" in capsys.readouterr().out
    check_slot_mapping(SLOT_WRONG["one short"])
    assert "expected 41 slots (one per position), got 40" in capsys.readouterr().out


def test_slot_checker_answer_key_fails_on_a_hidden_case_shown_alone(capsys: pytest.CaptureFixture[str]) -> None:
    check_slot_mapping(_slot_answer_key)
    out = capsys.readouterr().out
    assert out.count("hidden case ") == 1 and "of 150 hidden cases" in out and "seed" not in out


def test_slot_checker_stub_shows_no_cases(capsys: pytest.CaptureFixture[str]) -> None:
    def stub(t: Sequence[int], b: int, ps: Sequence[int]) -> list[int]:
        raise NotImplementedError("your turn")

    assert check_slot_mapping(stub) is False
    out = capsys.readouterr().out
    assert out.startswith("○ slot_mapping（槽位映射）: not solved yet (it raises NotImplementedError)")
    assert "seed" not in out and "expected" not in out


# --- append_token ---------------------------------------------------------------------------------
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
    return append_token(list(t), n, b, list(free))


def _append_bit_trick(t: list[int], n: int, b: int, free: list[int]) -> int:
    if n & (b - 1) == 0:
        t.append(free.pop(0))
    return t[-1] * b + (n & (b - 1))


def _append_global_b(t: list[int], n: int, b: int, free: list[int]) -> int:
    if n % B == 0:
        t.append(free.pop(0))
    return t[-1] * B + n % B


_APPEND_KEY: dict[tuple[tuple[int, ...], int, int, tuple[int, ...]], tuple[int, list[int], list[int]]] = {}
for _case in APPEND_CASES:
    _t, _f = list(_case.block_table), list(_case.free_blocks)
    for _i in range(_case.appends):
        _key = (tuple(_t), _case.num_tokens + _i, _case.block_size, tuple(_f))
        _slot = append_token(_t, _case.num_tokens + _i, _case.block_size, _f)
        _APPEND_KEY[_key] = (_slot, list(_t), list(_f))


def _append_answer_key(t: list[int], n: int, b: int, free: list[int]) -> int:
    """Replays the harvested walk-throughs; elsewhere it only allocates for an empty table."""
    hit = _APPEND_KEY.get((tuple(t), n, b, tuple(free)))
    if hit:
        t[:], free[:] = hit[1], hit[2]
        return hit[0]
    if not t:
        t.append(free.pop(0))
    return t[-1] * b + n % b


APPEND_WRONG = {f.__name__: f for f in (_allocates_one_token_early, _takes_the_back_of_the_free_list,
                                        _does_not_remove_the_block, _slot_without_times_b,
                                        _returns_slot_but_keeps_state, _append_bit_trick, _append_global_b,
                                        _append_answer_key)}


def _append_capacity(t: list[int], n: int, b: int, free: list[int]) -> int:
    if len(t) * b == n:    # every slot of the table is taken
        t.append(free.pop(0))
    block, offset = divmod(n, b)
    return t[block] * b + offset


def _append_numpy(t: list[int], n: int, b: int, free: list[int]) -> np.int64:
    if np.remainder(n, b) == 0:
        t.append(int(free.pop(0)))
    return np.int64(t[-1]) * b + np.remainder(n, b)


def _append_torch(t: list[int], n: int, b: int, free: list[int]) -> torch.Tensor:
    if n % b == 0:
        t.append(free.pop(0))
    return torch.tensor(t[-1]) * b + n % b


APPEND_RIGHT = {"reference": append_token, "capacity": _append_capacity, "numpy": _append_numpy,
                "torch": _append_torch}


@pytest.mark.parametrize("name", APPEND_RIGHT)
def test_append_checker_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_append_token(APPEND_RIGHT[name]) is True
    assert "✓ append_token（附加一個 token）: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", APPEND_WRONG)
def test_append_checker_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_append_token(APPEND_WRONG[name]) is False
    assert capsys.readouterr().out.startswith("✗ append_token（附加一個 token）: failed")


def test_append_checker_diff_shows_the_first_wrong_token(capsys: pytest.CaptureFixture[str]) -> None:
    check_append_token(_allocates_one_token_early)
    out = capsys.readouterr().out
    assert "token at position 7, starting from table [7, 1], free list [3, 0, 2, 4, 5, 6]:" in out
    assert "slot: expected 7, got 15" in out
    assert "block table: expected [7, 1], got [7, 1, 3]" in out
    assert "position 7 is not a multiple of the block size 4: the last block still has 1 free slots" in out
    assert "free list: expected [3, 0, 2, 4, 5, 6], got [0, 2, 4, 5, 6]" in out


def test_append_checker_blames_the_block_size(capsys: pytest.CaptureFixture[str]) -> None:
    check_append_token(_append_bit_trick)
    out = capsys.readouterr().out
    assert "hidden case" in out and "(right only when B is a power of two), but the block size here is 12" in out
    check_append_token(_append_global_b)
    out = capsys.readouterr().out
    assert "the block-table article" in out and "slot: expected 7, got 23 (the slot at block size 16, but the block size here is 4)" in out


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


def test_append_checker_stub_and_later_exceptions(capsys: pytest.CaptureFixture[str]) -> None:
    def not_yet(t: list[int], n: int, b: int, free: list[int]) -> int:
        raise NotImplementedError("your turn")

    assert check_append_token(not_yet) is False
    assert capsys.readouterr().out.startswith("○ append_token（附加一個 token）: not solved yet")

    def crashes_on_a_new_block(t: list[int], n: int, b: int, free: list[int]) -> int:
        if n % b == 0:
            raise ValueError("no block")
        return append_token(t, n, b, free)

    assert check_append_token(crashes_on_a_new_block) is False
    out = capsys.readouterr().out
    assert out.count("raised ValueError: no block") == 1 and 'raise ValueError("no block")' in out


# --- the block manager (a file, graded against the package's manager) ---------------------------
MANAGER = "BlockManager（區塊管理器）"
SOLUTION_FILE = Path(solution_manager.__file__)

# Right answers in other styles: each a whole file a reader might save.
MANAGER_RIGHT = {
    "math.ceil, freed one by one in reverse": '''
import math
from pagedkv_edu.core.block_manager import ManagerBase
from pagedkv_edu.core.prefix_cache import NO_HIT


class BlockManager(ManagerBase):
    def admit(self, seq, num_new_tokens, hit=NO_HIT):
        need = math.ceil(num_new_tokens / self.block_size)
        keep = self.watermark_blocks if len(self.held) > 0 else 0
        if need + keep > self.pool.num_free:
            return None
        self.held[seq] = self.pool.allocate(need)
        return list(self.held[seq])

    def grow(self, seq, num_new_tokens):
        table = self.held[seq]
        need = math.ceil((seq.num_computed_tokens + num_new_tokens) / self.block_size) - len(table)
        if need > self.pool.num_free:
            return None
        new = self.pool.allocate(need)
        table.extend(new)
        return new

    def release(self, seq):
        table = self.held.pop(seq)
        for block in reversed(table):
            self.pool.free(block)
        return table[::-1]
''',
    "slots: a block at a time while the table is short": '''
from pagedkv_edu.core.block_manager import ManagerBase


class BlockManager(ManagerBase):
    def _short_by(self, table, tokens):
        """Blocks missing to hold ``tokens``: the table's slots against the tokens, a block at a time."""
        slots, missing = len(table) * self.block_size, 0
        while slots < tokens:
            slots += self.block_size
            missing += 1
        return missing

    def admit(self, seq, num_new_tokens, hit=None):
        missing = self._short_by([], num_new_tokens)
        reserve = self.watermark_blocks if self.held else 0
        if self.pool.num_free - missing < reserve:
            return None
        table = []
        for _ in range(missing):
            table.append(self.pool.allocate()[0])
        self.held[seq] = table
        return table[:]

    def grow(self, seq, num_new_tokens):
        table = self.held[seq]
        missing = self._short_by(table, seq.num_computed_tokens + num_new_tokens)
        if missing > self.pool.num_free:
            return None
        new = [self.pool.allocate()[0] for _ in range(missing)]
        table += new
        return new

    def release(self, seq):
        table = self.held[seq]
        released = []
        while table:
            released.append(table.pop())
        del self.held[seq]
        self.pool.free_all(released)
        return released
''',
}

# Wrong answers: the solution with one mistake each, and the hint that names it.
WRONG_HEADER = '''
from pagedkv_edu.core.block_table import blocks_needed
from pagedkv_edu.exercises.solutions.block_manager import BlockManager as Solution


class BlockManager(Solution):'''

MANAGER_WRONG = {
    "head-first release": ('''
    def release(self, seq):
        released = self.held.pop(seq)          # first block first
        self.pool.free_all(released)
        return released
''', r"call: release\('a'\).*hint: the blocks went back first block first\. Release the last block first: in "
     r"chapter 8's prefix cache"),
    "a full last block counted partial": ('''
    def grow(self, seq, n):
        table, end = self.held[seq], seq.num_computed_tokens + n
        need = max(0, end // self.block_size + 1 - len(table))
        if need > self.pool.num_free:
            return None
        new = self.pool.allocate(need)
        table += new
        return new
''', r"call: grow\('a', 1\).*hint: 8 tokens fill exactly 2 blocks of 4: the last block is full, not partly filled\. "
     r"`tokens // block_size \+ 1` counts one block too many"),
    "a refusal that half-applies": ('''
    def admit(self, seq, n, hit=None):
        self.held[seq] = []                    # the table first, the check after
        keep = self.watermark_blocks if len(self.held) > 1 else 0
        if blocks_needed(n, self.block_size) + keep > self.pool.num_free:
            return None
        self.held[seq] = self.pool.allocate(blocks_needed(n, self.block_size))
        return list(self.held[seq])
''', r"call: admit\('b', 12\).*tables: yours \{'a': \[4, 0, 3\], 'b': \[\]\}.*hint: it returned None but changed the "
     r"memory\. A refusal changes nothing"),
    "a double free": ('''
    def release(self, seq):
        released = self.held.pop(seq)[::-1]
        self.pool.free_all(released)
        self.pool.free(released[0])            # the last block once more
        return released
''', r"release\('a'\) raised ValueError: block 3 is already free \(double free\), at `self\.pool\.free\(released\[0\]\)"
     r".*hint: a block was freed twice"),
    "a block freed while still in the table": ('''
    def release(self, seq):
        released = self.held[seq][::-1]        # freed, but the table stays
        self.pool.free_all(released)
        return released
''', r"hint: blocks \[7, 1, 3\] are back in the free queue but still in 'a''s table: a block freed while a table still "
     r"names it is handed to the next sequence"),
    "the watermark with nothing held": ('''
    def admit(self, seq, n, hit=None):
        need = blocks_needed(n, self.block_size)
        if need + self.watermark_blocks > self.pool.num_free:   # even when nobody runs
            return None
        self.held[seq] = self.pool.allocate(need)
        return list(self.held[seq])
''', r"call: admit\('a', 20\).*returned: yours None, expected \[0, 1, 2, 3, 4\].*hint: nothing holds memory, so the "
     r"watermark does not apply"),
    "a grow that always takes a block": ('''
    def grow(self, seq, n):
        if self.pool.num_free == 0:
            return None
        new = self.pool.allocate(1)
        self.held[seq] += new
        return new
''', r"call: grow\('a', 1\).*hint: grow took a block for 1 token that fit in the last block's 1 free slot \(it takes "
     r"one on every call, whatever the tokens\)"),
}


def _save(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "my_engine" / "block_manager.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    return path


def test_the_solution_passes_is_marked_and_grades_in_a_few_seconds(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path, SOLUTION_FILE.read_text())
    started = time.perf_counter()
    assert check_block_manager(path) is True
    assert time.perf_counter() - started < 10          # the notebook runs it (about 2 s when the machine is idle)
    out = capsys.readouterr().out
    assert out.startswith(f"✓ {MANAGER}: passed ({len(MANAGER_CASES)} cases from the text and {HIDDEN_RUNS} hidden")
    assert why_not_passed(path, "2") is None           # marked: load_parts gives the engine this file
    assert load_parts(path.parent, quiet=True).card.yours[:1] == ["block_manager"]


@pytest.mark.parametrize("name", MANAGER_RIGHT)
def test_the_manager_grader_accepts_right_answers_in_other_styles(name: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert check_block_manager(_save(tmp_path, MANAGER_RIGHT[name])) is True, capsys.readouterr().out


@pytest.mark.parametrize("name", MANAGER_WRONG)
def test_the_manager_grader_rejects_each_mistake_with_its_hint(name: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    body, hint = MANAGER_WRONG[name]
    path = _save(tmp_path, WRONG_HEADER + body)
    assert check_block_manager(path) is False
    out = capsys.readouterr().out
    assert out.startswith(f"✗ {MANAGER}: failed") and why_not_passed(path, "2") is not None
    assert re.search(hint, out, re.S), out
    others = [h for n, (_, h) in MANAGER_WRONG.items() if n != name]
    assert not any(re.search(h.split("hint: ", 1)[-1], out, re.S) for h in others), out   # its own hint, not another's


def test_the_hidden_runs_catch_what_the_shown_cases_miss(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bit shifts count blocks right at the text's block sizes 4 and 16, wrong at 5: only a hidden case shows it."""
    path = _save(tmp_path, WRONG_HEADER + '''
    def grow(self, seq, n):
        table, end, size = self.held[seq], seq.num_computed_tokens + n, self.block_size
        need = ((end + size - 1) >> (size.bit_length() - 1)) - len(table)
        if need > self.pool.num_free:
            return None
        new = self.pool.allocate(need)
        table += new
        return new
''')
    assert check_block_manager(path) is False
    out = capsys.readouterr().out
    assert "hidden case" in out and "(seeded random calls), call" in out and "the block-table article" not in out
    assert "call: grow(" in out and "before: tables {" in out
    assert check_block_manager(path) is False and capsys.readouterr().out == out   # derandomized: the same case


def test_the_hidden_runs_cover_the_edges_with_the_same_calls_whatever_is_loaded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every block size, refusals (by the pool and by the watermark), chunked and repeated admissions, growth
    that takes no block and growth that ends on a block's edge; and the same calls again after a module full
    of small integers is imported (hypothesis would draw some of them: the grader turns that off)."""
    seen: list[tuple] = []

    class Recorder(solution_manager.BlockManager):
        def admit(self, seq, n, hit=NO_HIT):
            ids = super().admit(seq, n, hit)
            seen.append(("admit", self.block_size, ids is None, n < seq.num_tokens,
                         seq.num_prompt_tokens < seq.num_tokens, bool(self.held) and self.watermark_blocks > 0))
            return ids

        def grow(self, seq, n):
            new = super().grow(seq, n)
            ends_on_an_edge = (seq.num_computed_tokens + n) % self.block_size == 0
            seen.append(("grow", self.block_size, new is None, new == [], ends_on_an_edge))
            return new

    assert run_hidden(Recorder, Path("unused")) == []
    first = list(seen)
    seen.clear()
    (tmp_path / "many_constants.py").write_text("VALUES = [" + ", ".join(str(n) for n in range(-5, 300)) + "]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert len(importlib.import_module("many_constants").VALUES) == 305   # a local module, in sys.modules
    assert run_hidden(Recorder, Path("unused")) == [] and seen == first
    assert not (tmp_path / ".hypothesis").exists()      # nor a cache of constants beside the notebooks
    monkeypatch.delitem(sys.modules, "many_constants")
    admits, grows = [s for s in seen if s[0] == "admit"], [s for s in seen if s[0] == "grow"]
    assert {s[1] for s in seen} == set(MANAGER_BLOCK_SIZES)
    assert any(s[2] for s in admits) and any(s[2] for s in grows)             # refusals
    assert any(s[2] and s[5] for s in admits)                                   # with a watermark and others running
    assert any(s[3] and not s[2] for s in admits) and any(s[4] for s in admits)  # chunked; a preempted one back
    assert any(s[3] for s in grows) and any(s[4] and not s[2] for s in grows)   # no block taken; ends on an edge


def test_the_stub_is_not_written_yet_and_shows_no_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path, '''
from pagedkv_edu.core.block_manager import ManagerBase


class BlockManager(ManagerBase):
    def admit(self, seq, num_new_tokens, hit=None):
        raise NotImplementedError("your turn")

    def grow(self, seq, num_new_tokens):
        raise NotImplementedError("your turn")

    def release(self, seq):
        raise NotImplementedError("your turn")
''')
    assert check_block_manager(path) is False
    out = capsys.readouterr().out
    assert out == (f"○ {MANAGER}: not solved yet (admit is not written yet: it raises NotImplementedError). "
                   "Write your version above and run the cell again.\n")


def test_files_that_give_no_manager_say_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_block_manager(tmp_path / "nowhere.py") is False
    assert "nowhere.py does not exist: run the %%writefile cell above" in capsys.readouterr().out
    cases = {"class BlockManager:\n    pass\n": "not a class built on ManagerBase",
             "class BlockManager(:\n": "raised SyntaxError",
             "from pagedkv_edu.core.block_manager import ManagerBase\nclass BlockManager(ManagerBase):\n    pass\n":
                 "has no admit, grow, release",
             WRONG_HEADER + "\n    def grow(self, seq, n):\n        raise NotImplementedError\n":
                 "call: grow('a', 1) ('a' holds 7 tokens; room for 8)\n      grow is not written yet"}
    for source, why in cases.items():
        assert check_block_manager(_save(tmp_path, source)) is False
        out = capsys.readouterr().out
        assert out.startswith(f"✗ {MANAGER}: failed") and why in out, out


def test_try_block_manager_returns_every_call_with_both_answers(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path, WRONG_HEADER + MANAGER_WRONG["head-first release"][0])
    tried = try_block_manager(path, 0)
    assert capsys.readouterr().out == "" and tried["case"] == MANAGER_CASES[0].name
    assert [(c["call"], c["yours"], c["expected"]) for c in tried["calls"]] == [
        ("admit('a', 7)", [7, 1], [7, 1]), ("grow('a', 1)", [], []), ("grow('a', 1)", [3], [3]),
        ("release('a')", [7, 1, 3], [3, 1, 7])]
    assert tried["calls"][-1]["your_free_queue"][-3:] == [7, 1, 3]
    assert tried["calls"][-1]["expected_free_queue"][-3:] == [3, 1, 7]


# --- in zh-TW: every wrong answer, a raise and the stub explained in Chinese, nothing left in English -------------
ZH_FAILED, ZH_NOT_SOLVED = "：未通過", "：尚未作答"


def _not_yet(*args: object) -> None:
    raise NotImplementedError("your turn")


@pytest.mark.parametrize("name", [*SLOT_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_slot_checker_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = {**SLOT_WRONG, "raises": lambda t, b, ps: [t[p // 2] * b + p % b for p in ps], "stub": _not_yet}[name]
    assert check_slot_mapping(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith((f"✗ slot_mapping（槽位映射）{ZH_FAILED}", f"○ slot_mapping（槽位映射）{ZH_NOT_SOLVED}")), out
    assert untranslated(out) == []


@pytest.mark.parametrize("name", [*APPEND_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_append_checker_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = {**APPEND_WRONG, "raises": lambda t, n, b, free: t[n // b] * b + n % b, "stub": _not_yet}[name]
    assert check_append_token(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith((f"✗ append_token（附加一個 token）{ZH_FAILED}",
                           f"○ append_token（附加一個 token）{ZH_NOT_SOLVED}")), out
    assert untranslated(out) == []


MANAGER_ZH = {**{name: body for name, (body, _) in MANAGER_WRONG.items()},
              "raises": "\n    def grow(self, seq, n):\n        raise KeyError(seq.seq_id)\n",
              "stub": "\n    def admit(self, seq, n, hit=None):\n        raise NotImplementedError\n"}


@pytest.mark.parametrize("name", MANAGER_ZH)
@pytest.mark.usefixtures("zh_tw")
def test_the_manager_grader_explains_in_zh_tw(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_block_manager(_save(tmp_path, WRONG_HEADER + MANAGER_ZH[name])) is False
    out = capsys.readouterr().out
    assert out.startswith((f"✗ {MANAGER}{ZH_FAILED}", f"○ {MANAGER}{ZH_NOT_SOLVED}")), out
    assert untranslated(out) == []


@pytest.mark.usefixtures("zh_tw")
def test_the_diagnoses_read_in_zh_tw(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check_slot_mapping(SLOT_WRONG["global B = 16"])
    assert "這些是區塊大小為 16 時的槽位，但這裡的區塊大小是 4：請使用 block_size 參數" in capsys.readouterr().out
    check_append_token(_allocates_one_token_early)
    out = capsys.readouterr().out
    assert "位置 7 的 token（起始狀態：區塊表 [7, 1]，空閒清單 [3, 0, 2, 4, 5, 6]）：" in out
    assert "位置 7 不是區塊大小 4 的倍數：最後一個區塊還有 1 個空閒槽位" in out
    check_block_manager(_save(tmp_path, WRONG_HEADER + MANAGER_WRONG["head-first release"][0]))
    out = capsys.readouterr().out
    assert "    呼叫：release('a')\n" in out and "提示：這些區塊是從第一個區塊開始歸還的。請從最後一個區塊開始釋放" in out
    assert check_block_manager(tmp_path / "nowhere.py") is False
    assert "nowhere.py 不存在：請執行上方的 %%writefile 儲存格" in capsys.readouterr().out
