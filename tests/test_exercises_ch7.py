"""Chapter 7's grader accepts right answers in any style, rejects the usual wrong ones, and says why."""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.prefix_cache import PrefixHit
from pagedkv_edu.core.request import Request, SamplingParams
from pagedkv_edu.engine.beam import BeamSearchParams, beam_search
from pagedkv_edu.engine.engine import LLMEngine
from pagedkv_edu.engine.guards import PartError
from pagedkv_edu.exercises.ch2 import MANAGER_BLOCK_SIZES, MANAGER_CASES, check_block_manager
from pagedkv_edu.exercises.ch7 import (
    COW_CASES,
    HIDDEN_COW_CASES,
    SHARING_CASES,
    SHARING_RUNS,
    SHARING_SETTINGS,
    _ref_counts,
    check_append_with_cow,
    check_sharing_manager,
    run_hidden,
    sharing_machine,
    try_append_with_cow,
    try_sharing_manager,
)
from pagedkv_edu.exercises.my_engine import load_parts, mark_passed, why_not_passed
from pagedkv_edu.exercises.solutions import block_manager as chapter2_solution
from pagedkv_edu.exercises.solutions import sharing_manager as sharing_solution
from pagedkv_edu.exercises.solutions.ch7 import append_with_cow
from pagedkv_edu.model import load_model
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)


# --- the solutions agree with the package ----------------------------------------------------
def test_append_with_cow_agrees_with_the_block_manager() -> None:
    """The first case through BlockManager.fork / grow / take_copies gives the same story."""
    m = BlockManager(6, 4)
    parent = Request("parent", None, num_prompt_tokens=6)
    m.admit(parent, 6)                         # blocks 0, 1: the case's start
    parent.num_computed_tokens = 6
    child = parent.fork("child", 1)
    child.num_computed_tokens = 6
    m.fork(parent, child)
    records = {"parent": parent, "child": child}
    tables, refs, free = {"parent": [0, 1], "child": [0, 1]}, [2, 2, 0, 0, 0, 0], [2, 3, 4, 5]
    lengths = {"parent": 6, "child": 6}
    for seq in COW_CASES[0].appends:
        slot, copy = append_with_cow(tables[seq], lengths[seq], 4, refs, free)
        record = records[seq]
        record.output_token_ids.append(0)
        assert m.grow(record, 1) is not None
        record.num_computed_tokens += 1
        lengths[seq] += 1
        assert m.take_copies().copy == ([copy] if copy else [])
        assert tables[seq] == m.block_ids(record) and refs == m.pool.ref_counts
        assert slot == m.table(record).slot(lengths[seq] - 1)


def test_hidden_cases_cover_the_edges() -> None:
    assert {3, 5, 6, 12} <= {c.block_size for c in HIDDEN_COW_CASES}
    copies = 0
    for case in HIDDEN_COW_CASES:   # the hidden forks do copy, at block sizes other than 4
        tables, refs, free = {s: list(t) for s, t, _ in case.tables}, _ref_counts(case), list(case.free_blocks)
        lengths = {s: n for s, _, n in case.tables}
        for seq in case.appends:
            copies += append_with_cow(tables[seq], lengths[seq], case.block_size, refs, free)[1] is not None \
                and case.block_size != 4
            lengths[seq] += 1
    assert copies > 20


# --- copy-on-write ------------------------------------------------------------------------------
def _never_copies(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    if n % b == 0:
        t.append(free.pop(0))
        refs[t[-1]] = 1
    return t[-1] * b + n % b, None


def _copies_full_blocks_too(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    if t and refs[t[-1]] > 1:
        shared, own = t[-1], free.pop(0)
        refs[shared] -= 1
        refs[own] = 1
        t[-1] = own
        if n % b == 0:
            t.append(free.pop(0))
            refs[t[-1]] = 1
        return t[-1] * b + n % b, (shared, own)
    return _never_copies(t, n, b, refs, free)


def _keeps_the_shared_reference(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    if n % b and refs[t[-1]] > 1:
        shared, own = t[-1], free.pop(0)
        refs[own] = 1
        t[-1] = own
        return own * b + n % b, (shared, own)
    return _never_copies(t, n, b, refs, free)


def _writes_into_the_shared_block(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    shared = t[-1] if t else None
    slot, copy = append_with_cow(t, n, b, refs, free)
    return (shared * b + n % b, copy) if copy else (slot, copy)


def _copies_unshared_blocks(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    if n % b:
        shared, own = t[-1], free.pop(0)
        refs[shared] -= 1
        refs[own] = 1
        t[-1] = own
        return own * b + n % b, (shared, own)
    return _never_copies(t, n, b, refs, free)


def _block_size_four(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    """The chapter's example hard-coded."""
    return append_with_cow(t, n, 4, refs, free)


def _cow_bit_trick(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    copy = None
    if n & (b - 1) == 0:
        t.append(free.pop(0))
        refs[t[-1]] = 1
    elif refs[t[-1]] > 1:
        shared, own = t[-1], free.pop(0)
        refs[shared] -= 1
        refs[own] = 1
        t[-1] = own
        copy = (shared, own)
    return t[-1] * b + (n & (b - 1)), copy


def _harvest_cow() -> dict:
    key = {}
    for case in COW_CASES:
        tables, refs, free = {s: list(t) for s, t, _ in case.tables}, _ref_counts(case), list(case.free_blocks)
        lengths = {s: n for s, _, n in case.tables}
        for seq in case.appends:
            k = (tuple(tables[seq]), lengths[seq], case.block_size, tuple(refs), tuple(free))
            result = append_with_cow(tables[seq], lengths[seq], case.block_size, refs, free)
            key[k] = (result, list(tables[seq]), list(refs), list(free))
            lengths[seq] += 1
    return key


_COW_KEY = _harvest_cow()


def _cow_answer_key(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    hit = _COW_KEY.get((tuple(t), n, b, tuple(refs), tuple(free)))
    if hit is None:
        return _never_copies(t, n, b, refs, free)
    t[:], refs[:], free[:] = hit[1], hit[2], hit[3]
    return hit[0]


COW_WRONG = {f.__name__: f for f in (_never_copies, _copies_full_blocks_too, _keeps_the_shared_reference,
                                     _writes_into_the_shared_block, _copies_unshared_blocks, _block_size_four,
                                     _cow_bit_trick, _cow_answer_key)}


def _cow_restructured(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    block, offset = divmod(n, b)
    if block == len(t):                     # no room: a fresh block
        t.append(free.pop(0))
        refs[t[-1]] += 1
        return t[-1] * b + offset, None
    last = t[-1]
    if refs[last] == 1:                     # ours alone: write in place
        return last * b + offset, None
    own = free.pop(0)
    refs[last], refs[own] = refs[last] - 1, 1
    t[-1] = own
    return own * b + offset, [last, own]   # a list is a pair too


def _cow_numpy(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    slot, copy = append_with_cow(t, n, b, refs, free)
    return np.int64(slot), None if copy is None else (np.int64(copy[0]), np.int64(copy[1]))


def _cow_torch_slot(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    slot, copy = append_with_cow(t, n, b, refs, free)
    return torch.tensor(slot), copy


COW_RIGHT = {"reference": append_with_cow, "restructured": _cow_restructured, "numpy": _cow_numpy,
             "torch": _cow_torch_slot}


@pytest.mark.parametrize("name", COW_RIGHT)
def test_cow_checker_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_append_with_cow(COW_RIGHT[name]) is True
    assert "✓ append_with_cow（寫入時複製）: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", COW_WRONG)
def test_cow_checker_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_append_with_cow(COW_WRONG[name]) is False
    assert capsys.readouterr().out.startswith("✗ append_with_cow（寫入時複製）: failed")


def test_cow_checker_diff_explains_the_mistake(capsys: pytest.CaptureFixture[str]) -> None:
    check_append_with_cow(_never_copies)
    out = capsys.readouterr().out
    assert ("child appends token 6 (block size 4) to table [0, 1], ref counts [2, 2, 0, 0, 0, 0], "
            "free list [2, 3, 4, 5]:") in out
    assert "copy: expected (1, 2), got None  (block 1 is shared, ref count 2, and holds only 2 of 4 tokens" in out
    assert "slot: expected 10, got 6  (block 1 is shared: the other sequences would see this token)" in out
    check_append_with_cow(_keeps_the_shared_reference)
    assert "reference counts: expected [2, 1, 1, 0, 0, 0], got [2, 2, 1, 0, 0, 0] (blocks [1] differ)" in \
        capsys.readouterr().out
    check_append_with_cow(_copies_full_blocks_too)
    assert "nothing needs copying" in capsys.readouterr().out


def test_cow_checker_blames_the_block_size(capsys: pytest.CaptureFixture[str]) -> None:
    check_append_with_cow(_block_size_four)
    out = capsys.readouterr().out
    assert "hidden case" in out and "the slot at block size 4 or " in out and "but the block size here is 12" in out
    check_append_with_cow(_cow_bit_trick)
    out = capsys.readouterr().out
    assert "hidden case" in out and ("power of two" in out or "multiple of the block size" in out)


def test_cow_checker_stub_and_exceptions(capsys: pytest.CaptureFixture[str]) -> None:
    def not_yet(*args):
        raise NotImplementedError("your turn")

    assert check_append_with_cow(not_yet) is False
    assert capsys.readouterr().out.startswith("○ append_with_cow（寫入時複製）: not solved yet")

    def crashes_on_a_copy(t, n, b, refs, free):
        if n % b and refs[t[-1]] > 1:
            raise KeyError("copy")
        return append_with_cow(t, n, b, refs, free)

    assert check_append_with_cow(crashes_on_a_copy) is False
    assert capsys.readouterr().out.count("raised KeyError: 'copy'") == 1


def test_try_append_with_cow_shows_each_step_and_survives_an_exception() -> None:
    steps = try_append_with_cow(append_with_cow, 0)
    assert [s["sequence"] for s in steps] == ["child", "parent", "child"]
    assert steps[0]["result"] == (10, (1, 2)) and steps[0]["block_table_after"] == [0, 2]
    assert steps[0]["ref_counts"] == [2, 2, 0, 0, 0, 0] and steps[0]["ref_counts_after"] == [2, 1, 1, 0, 0, 0]

    def broken(t, n, b, refs, free):
        raise IndexError("pop from empty list")

    (only,) = try_append_with_cow(broken, 3)
    assert isinstance(only["result"], IndexError)
    with pytest.raises(ValueError, match="case"):
        try_append_with_cow(append_with_cow, 4)


def test_saving_prediction_is_judged_by_value(capsys: pytest.CaptureFixture[str]) -> None:
    from pagedkv_edu.exercises.ch7 import check_saving_prediction

    assert check_saving_prediction(None, 10.2) is False and "no prediction yet" in capsys.readouterr().out
    assert check_saving_prediction(12, 10.2) is True
    assert check_saving_prediction(np.float64(8.0), 10.2) is True
    assert check_saving_prediction(21, 10.2) is False and "measured 10.2%" in capsys.readouterr().out
    assert check_saving_prediction("lower", 10.2) is False and "not a number" in capsys.readouterr().out


# --- beam search: fork and free -------------------------------------------------------------------
from pagedkv_edu.exercises.ch7 import BEAM_CASES, HIDDEN_BEAM_CASES, check_regroup_beams, try_regroup_beams  # noqa: E402
from pagedkv_edu.exercises.solutions.ch7 import regroup_beams  # noqa: E402


def test_regroup_beams_agrees_with_the_block_manager() -> None:
    """The reference, case by case, against BlockManager.fork / finish on the same tables."""
    from collections import Counter

    for case in BEAM_CASES + tuple(HIDDEN_BEAM_CASES[:30]):
        refs = [0] * case.num_blocks
        for table in case.tables:
            for b in table:
                refs[b] += 1
        free = [b for b in range(case.num_blocks) if refs[b] == 0]
        new = regroup_beams([list(t) for t in case.tables], refs, free, list(case.parents))
        m = BlockManager(case.num_blocks, 4)
        beams = []
        for i, table in enumerate(case.tables):
            # The same tables in a real pool: admitted as a hit on exactly these blocks, each of which
            # the admission takes (a free one) or gains a reference to (one an earlier beam holds).
            beam = Request(i, None, num_prompt_tokens=4 * len(table))
            assert m.admit(beam, 0, PrefixHit(tuple(table), 4 * len(table))) == list(table)
            beam.num_computed_tokens = 4 * len(table)
            beams.append(beam)
        for i, beam in enumerate(beams):
            if i not in case.parents:
                m.release(beam)
        seen, kept = set(), []
        for j, p in enumerate(case.parents):
            if p in seen:
                child = beams[p].fork(("child", j), j)
                child.num_computed_tokens = beams[p].num_computed_tokens
                m.fork(beams[p], child)
                kept.append(child)
            else:
                seen.add(p)
                kept.append(beams[p])
        assert [m.block_ids(beam) for beam in kept] == new
        assert m.pool.ref_counts == refs and Counter(m.pool.free_ids()) == Counter(free)


def test_hidden_beam_cases_cover_the_edges() -> None:
    assert {len(c.parents) for c in HIDDEN_BEAM_CASES} == set(range(1, 7))
    assert any(len(set(c.parents)) == 1 and len(c.parents) > 2 for c in HIDDEN_BEAM_CASES)   # all from one parent
    losers_share = 0
    for c in HIDDEN_BEAM_CASES:
        kept = {b for p in c.parents for b in c.tables[p]}
        losers_share += any(b in kept for i, t in enumerate(c.tables) if i not in c.parents for b in t)
    assert losers_share > 20


def _free_everything_of_a_loser(tables, refs, free, parents):
    for i, t in enumerate(tables):
        if i not in parents:
            for b in t:
                if refs[b]:
                    refs[b] = 0
                    free.append(b)
    return _forks(tables, refs, parents)


def _forks(tables, refs, parents, incref=True, copy=True, first_too=False):
    new, seen = [], set()
    for p in parents:
        if p in seen or first_too:
            if incref:
                for b in tables[p]:
                    refs[b] += 1
            new.append(list(tables[p]) if copy else tables[p])
        else:
            seen.add(p)
            new.append(tables[p])
        seen.add(p)
    return new


def _free_losers(tables, refs, free, parents):
    for i, t in enumerate(tables):
        if i not in parents:
            for b in t:
                refs[b] -= 1
                if refs[b] == 0:
                    free.append(b)


def _fork_without_a_reference(tables, refs, free, parents):
    _free_losers(tables, refs, free, parents)
    return _forks(tables, refs, parents, incref=False)


def _fork_by_alias(tables, refs, free, parents):
    _free_losers(tables, refs, free, parents)
    return _forks(tables, refs, parents, copy=False)


def _first_child_counts_too(tables, refs, free, parents):
    _free_losers(tables, refs, free, parents)
    return _forks(tables, refs, parents, first_too=True)


def _keeps_the_losers(tables, refs, free, parents):
    return _forks(tables, refs, parents)


def _children_grouped_by_parent(tables, refs, free, parents):
    _free_losers(tables, refs, free, parents)
    return _forks(tables, refs, sorted(parents))


def _counter_style(tables, refs, free, parents):
    from collections import Counter

    chosen = Counter(parents)
    for i, t in enumerate(tables):
        for b in t:
            refs[b] += max(chosen[i], 1) - 1 if chosen[i] else -1
    free += sorted({b for t in tables for b in t if refs[b] == 0})
    out, used = [], set()
    for p in parents:
        out.append(tables[p] if p not in used else tables[p][:])
        used.add(p)
    return out


def _numpy_copies_for_all(tables, refs, free, parents):
    counts = np.array(refs)
    for i, t in enumerate(tables):
        if i not in parents:
            np.subtract.at(counts, t, 1)
            free.extend(b for b in t if counts[b] == 0 and b not in free)
    firsts = {p: j for j, p in reversed(list(enumerate(parents)))}
    for j, p in enumerate(parents):
        if firsts[p] != j:
            np.add.at(counts, tables[p], 1)
    refs[:] = counts.tolist()
    return [np.array(tables[p]) for p in parents]


BEAM_RIGHT = {"reference": regroup_beams, "counter": _counter_style, "numpy": _numpy_copies_for_all}
BEAM_WRONG = {"frees shared blocks": _free_everything_of_a_loser, "fork without a reference": _fork_without_a_reference,
              "fork by alias": _fork_by_alias, "first child counts": _first_child_counts_too,
              "losers kept": _keeps_the_losers, "children grouped": _children_grouped_by_parent}


@pytest.mark.parametrize("name", BEAM_RIGHT)
def test_beam_checker_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_regroup_beams(BEAM_RIGHT[name]) is True
    assert "✓ regroup_beams（束搜尋的分岔與釋放）: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", BEAM_WRONG)
def test_beam_checker_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_regroup_beams(BEAM_WRONG[name]) is False
    assert capsys.readouterr().out.startswith("✗ regroup_beams（束搜尋的分岔與釋放）: failed")


def test_beam_checker_names_the_cause(capsys: pytest.CaptureFixture[str]) -> None:
    check_regroup_beams(_fork_by_alias)
    assert "same list object" in capsys.readouterr().out
    check_regroup_beams(_fork_without_a_reference)
    out = capsys.readouterr().out
    assert "is a fork: every block of the parent's table gains" in out and "adds none" not in out
    check_regroup_beams(_first_child_counts_too)
    out = capsys.readouterr().out
    assert "adds none" in out and "gains a reference" not in out


def test_beam_checker_stub_and_try(capsys: pytest.CaptureFixture[str]) -> None:
    def not_yet(*args):
        raise NotImplementedError("your turn")

    assert check_regroup_beams(not_yet) is False
    assert capsys.readouterr().out.startswith("○ regroup_beams（束搜尋的分岔與釋放）: not solved yet")
    seen = try_regroup_beams(regroup_beams, 0)
    assert seen["result"] == [[0, 1, 2], [0, 1, 2], [0, 1, 3], [0, 1, 2]]
    assert seen["ref_counts_after"][:6] == [4, 4, 3, 1, 0, 0] and sorted(seen["free_blocks_after"]) == [4, 5, 6, 7]
    assert isinstance(try_regroup_beams(not_yet, 1)["result"], NotImplementedError)


# --- your block manager, with sharing: chapter 2's file, with fork and copy-on-write ----------------
SHARING = "BlockManager: fork and copy-on-write（分岔與寫入時複製）"

# Right answers in other styles: whole files a reader might save (neither imports chapter 2's solution).
SHARING_RIGHT = {
    "from scratch: ceil, a block at a time, copies filtered in a loop": '''
import math

from pagedkv_edu.core.block_manager import ManagerBase
from pagedkv_edu.core.prefix_cache import NO_HIT


class BlockManager(ManagerBase):
    def _blocks(self, tokens):
        return math.ceil(tokens / self.block_size)

    def admit(self, seq, num_new_tokens, hit=NO_HIT):
        need = self._blocks(num_new_tokens)
        reserve = self.watermark_blocks if len(self.held) > 0 else 0
        if need + reserve > self.pool.num_free:
            return None
        self.held[seq] = [self.pool.allocate()[0] for _ in range(need)]
        return list(self.held[seq])

    def fork(self, parent, child):
        ids = self.held[parent]
        for block in ids:
            self.pool.incref(block)
        self.held[child] = ids[:]
        return self.held[child]                  # nobody reads what fork returns

    def grow(self, seq, num_new_tokens):
        table = self.held[seq]
        missing = self._blocks(seq.num_computed_tokens + num_new_tokens) - len(table)
        writes_shared = (num_new_tokens > 0 and seq.num_computed_tokens % self.block_size > 0
                         and self.pool.ref_counts[table[-1]] >= 2)
        if missing + (1 if writes_shared else 0) > self.pool.num_free:
            return None
        gained = []
        if writes_shared:
            mine = self.pool.allocate()[0]
            old = table.pop()
            self.pool.free(old)
            table.append(mine)
            self.copies.copy.append((old, mine))
            gained.append(mine)
        for _ in range(missing):
            block = self.pool.allocate()[0]
            table.append(block)
            gained.append(block)
        return gained

    def release(self, seq):
        table = self.held.pop(seq)
        out = []
        for block in reversed(table):
            self.pool.free(block)
            out.append(block)
        kept = []
        for src, dst in self.copies.copy:
            if self.pool.ref_counts[dst] > 0:
                kept.append((src, dst))
        self.copies.copy = kept
        return out
''',
    "slices and sets: the copy's block taken with the new ones, the freed blocks' copies dropped": '''
from pagedkv_edu.core.block_manager import ManagerBase
from pagedkv_edu.core.block_table import blocks_needed


class BlockManager(ManagerBase):
    def admit(self, seq, num_new_tokens, hit=None):
        need = -(-num_new_tokens // self.block_size)
        if self.pool.num_free - need < (self.watermark_blocks if self.held else 0):
            return None
        self.held[seq] = self.pool.allocate(need)
        return self.held[seq][:]

    def fork(self, parent, child):
        self.held[child] = [block for block in self.held[parent]]
        list(map(self.pool.incref, self.held[child]))

    def grow(self, seq, num_new_tokens):
        table, size = self.held[seq], self.block_size
        tail = seq.num_computed_tokens % size
        cow = bool(num_new_tokens and tail and self.pool.ref_counts[table[-1]] != 1)
        extra = blocks_needed(seq.num_computed_tokens + num_new_tokens, size) - len(table)
        if self.pool.num_free < extra + cow:
            return None
        taken = self.pool.allocate(extra + cow)
        if cow:
            self.copies.copy += [(table[-1], taken[0])]
            self.pool.free(table[-1])
            table[-1:] = taken[:1]
        table.extend(taken[1:] if cow else taken)
        return taken

    def release(self, seq):
        freed = self.held.pop(seq)[::-1]
        self.pool.free_all(freed)
        gone = {block for block in freed if self.pool.ref_counts[block] == 0}
        self.copies.copy = [pair for pair in self.copies.copy if pair[1] not in gone]
        return freed
''',
}

# Wrong answers: the solution with one mistake each (most switch one rule of its grow off), and the hint that
# names it.
SHARING_WRONG_HEADER = '''
from pagedkv_edu.core.block_table import blocks_needed
from pagedkv_edu.exercises.solutions.block_manager import BlockManager as Chapter2
from pagedkv_edu.exercises.solutions.sharing_manager import BlockManager as Solution


class BlockManager(Solution):
    def _grow(self, seq, n, *, partial_only=True, shared_only=True, drop=True, queue=True, fresh_first=True,
              count_copy=True, check_first=True):
        """The solution's grow, with one of its rules switched off by a flag."""
        table, start = self.held[seq], seq.num_computed_tokens
        end = start + self.check_new(seq, n, start)
        copy = (n > 0 and bool(table) and (start % self.block_size != 0 or not partial_only)
                and (self.pool.ref_counts[table[-1]] > 1 or not shared_only))
        need = blocks_needed(end, self.block_size) - len(table)
        if check_first and need + (copy if count_copy else 0) > self.pool.num_free:
            return None
        if not check_first and copy > self.pool.num_free:   # room for the copy only, checked
            return None
        new = []
        if copy:
            shared, (own,) = table[-1], self.pool.allocate(1)
            if drop:
                self.pool.free(shared)
            table[-1] = own
            if queue:
                self.copies.copy.append((shared, own))
            new.append(own)
        if not check_first and need > self.pool.num_free:  # the new blocks checked after the copy
            return None
        appended = self.pool.allocate(need)
        table += appended
        return new + appended if fresh_first else appended + new
'''

SHARING_WRONG = {
    "fork copies every block": ('''
    def fork(self, parent, child):
        table = self.held[parent]
        own = self.pool.allocate(len(table))           # a copy of each block, at once
        self.copies.copy += list(zip(table, own))
        self.held[child] = own
''', r"call: fork\('r0', 'r0.1'\).*hint: the fork gave 'r0.1' new blocks \[2, 3\]: a child shares every block of its "
     r"parent \(\[0, 1\]\), each gaining a reference, and nothing is copied at fork"),
    "fork takes no reference": ('''
    def fork(self, parent, child):
        self.held[child] = list(self.held[parent])     # the ids, but no reference
''', r"call: fork\('r0', 'r0.1'\).*reference counts: block 0: yours 1, expected 2.*hint: 'r0.1' names blocks \[0, 1\], "
     r"but their reference counts did not rise"),
    "copy-on-write writes in place": ('''
    def grow(self, seq, n):
        return Chapter2.grow(self, seq, n)             # chapter 2's grow: no copy
''', r"call: grow\('r0.1', 1\).*hint: block 1 is shared \(reference count 4\) and holds only 2 tokens of 4: writing "
     r"'r0.1''s new token into it shows it to the other sequences"),
    "the shared block keeps its reference": ('''
    def grow(self, seq, n):
        return self._grow(seq, n, drop=False)
''', r"call: grow\('r0.1', 1\).*hint: the copy took block 2, but block 1 kept 'r0.1''s reference \(yours 4, expected "
     r"3\)"),
    "the copy is not queued": ('''
    def grow(self, seq, n):
        return self._grow(seq, n, queue=False)
''', r"call: grow\('r0.1', 1\).*queued copies \(self.copies.copy\): yours \[\], expected \[\(1, 2\)\].*hint: block 2 "
     r"took block 1's place but holds none of its K/V yet"),
    "a full last block copied": ('''
    def grow(self, seq, n):
        return self._grow(seq, n, partial_only=False)
''', r"call: grow\('c', 1\).*hint: 'c''s last block 5 is full \(8 tokens, a multiple of 4\): the new tokens go to new "
     r"blocks"),
    "the fresh block last": ('''
    def grow(self, seq, n):
        return self._grow(seq, n, fresh_first=False)
''', r"call: grow\('c', 5\).*returned: yours \[0, 7\], expected \[7, 0\].*hint: grow returns the fresh block 7 first"),
    "a refusal that half-applies a copy": ('''
    def grow(self, seq, n):
        return self._grow(seq, n, check_first=False)
''', r"call: grow\('c', 3\).*hint: it returned None, but the copy-on-write was already made"),
    "the copy's block not counted": ('''
    def grow(self, seq, n):
        return self._grow(seq, n, count_copy=False)
''', r"call: grow\('c', 1\).*raised OutOfBlocksError.*hint: the copy of block 1 takes a free block too: 'c' needs 0 "
     r"new blocks and one for the copy, 1 in all, and 0 are free"),
    "an unshared block copied": ('''
    def grow(self, seq, n):
        return self._grow(seq, n, shared_only=False)
''', r"call: grow\('a', 1\).*hint: nobody else holds block 1 \(reference count 1\): 'a' writes into it in place"),
    "a release keeps the queued copy": ('''
    def release(self, seq):
        return Chapter2.release(self, seq)             # the copies into freed blocks stay queued
''', r"call: release\('c'\).*hint: the copy \(2, 7\) is still queued, but this release freed block 7"),
    "fork by alias": ('''
    def fork(self, parent, child):
        for block in self.held[parent]:
            self.pool.incref(block)
        self.held[child] = self.held[parent]           # the parent's list itself
''', r"call: fork\('r0', 'r0.1'\).*'r0.1''s table is 'r0''s own list object, not a copy"),
}


def _save_manager(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "my_engine" / "block_manager.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    return path


def test_the_sharing_solution_passes_is_marked_and_grades_in_a_few_seconds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save_manager(tmp_path, Path(sharing_solution.__file__).read_text())
    started = time.perf_counter()
    assert check_sharing_manager(path) is True
    assert time.perf_counter() - started < 10          # the notebook runs it (about 1.5 s when the machine is idle)
    out = capsys.readouterr().out
    assert out.startswith(f"✓ {SHARING}: passed ({len(MANAGER_CASES) + len(SHARING_CASES)} cases from the text "
                          f"and {SHARING_RUNS} hidden")
    assert why_not_passed(path, "7") is None and load_parts(path.parent, quiet=True).card.yours == ["block_manager"]


@pytest.mark.parametrize("name", SHARING_RIGHT)
def test_the_sharing_grader_accepts_right_answers_in_other_styles(name: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert check_sharing_manager(_save_manager(tmp_path, SHARING_RIGHT[name])) is True, capsys.readouterr().out


@pytest.mark.parametrize("name", SHARING_WRONG)
def test_the_sharing_grader_rejects_each_mistake_with_its_hint(name: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    body, hint = SHARING_WRONG[name]
    path = _save_manager(tmp_path, SHARING_WRONG_HEADER + body)
    assert check_sharing_manager(path) is False
    out = capsys.readouterr().out
    assert out.startswith(f"✗ {SHARING}: failed") and why_not_passed(path, "7") is not None
    assert re.search(hint, out, re.S), out
    others = [h for n, (_, h) in SHARING_WRONG.items() if n != name]
    assert not any(re.search(h.split(".*", 1)[-1].split("hint: ", 1)[-1], out, re.S) for h in others), out


def test_the_sharing_hidden_runs_catch_what_the_shown_cases_miss(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A bit mask finds a partly filled block right at the text's block sizes 4 and 16, wrong at 5: only a hidden
    case shows it."""
    path = _save_manager(tmp_path, SHARING_WRONG_HEADER + '''
    def grow(self, seq, n):
        table, start, size = self.held[seq], seq.num_computed_tokens, self.block_size
        if n and start & (size - 1) and self.pool.ref_counts[table[-1]] > 1:
            return Solution.grow(self, seq, n)
        return Chapter2.grow(self, seq, n)
''')
    assert check_sharing_manager(path) is False
    out = capsys.readouterr().out
    assert "hidden case" in out and "(seeded random calls), call" in out and "the chapter's demo" not in out
    assert "shared blocks (reference counts) {" in out and "hint: block " in out
    assert check_sharing_manager(path) is False and capsys.readouterr().out == out   # derandomized: the same case


def test_the_sharing_hidden_runs_cover_forks_copies_and_refusals() -> None:
    """At every block size: forks of partly filled blocks, copies (some with new blocks after them), the last holder
    writing in place, full shared blocks grown without a copy, refusals that would need a copy, sharers released
    (one with its copy still queued)."""
    seen: Counter = Counter()
    shared_once: set[tuple[int, int]] = set()

    class Recorder(sharing_solution.BlockManager):
        def fork(self, parent, child):
            super().fork(parent, child)
            shared_once.update((id(self), b) for b in self.held[parent])
            seen["fork", "partly filled" if parent.num_computed_tokens % self.block_size else "full"] += 1

        def grow(self, seq, n):
            table, size = self.held[seq], self.block_size
            last = table[-1] if table else None
            partial = n > 0 and seq.num_computed_tokens % size != 0
            refs = self.pool.ref_counts[last] if last is not None else 0
            new = super().grow(seq, n)
            if refs > 1 and partial:
                seen["write into a shared block", "refused" if new is None else "copied", size] += 1
                seen["copy and new blocks"] += new is not None and len(new) > 1
            elif refs > 1 and n:
                seen["full shared block grown", "refused" if new is None else "no copy"] += 1
            elif partial and (id(self), last) in shared_once and new is not None:
                seen["last holder writes in place"] += 1
            return new

        def release(self, seq):
            queued, shares = len(self.copies.copy), max(self.pool.ref_counts[b] for b in self.held[seq] or [0]) > 1
            released = super().release(seq)
            seen["sharer released"] += shares
            seen["queued copy dropped"] += len(self.copies.copy) < queued
            return released

    assert run_hidden(Recorder, Path("unused"), sharing_machine, SHARING_SETTINGS) == []
    assert seen["fork", "partly filled"] > 50 and seen["fork", "full"] > 50
    assert all(seen["write into a shared block", "copied", size] > 0 for size in MANAGER_BLOCK_SIZES if size > 1)
    assert sum(v for k, v in seen.items() if k[:2] == ("write into a shared block", "refused")) > 20
    assert seen["copy and new blocks"] > 5 and seen["last holder writes in place"] > 20
    assert seen["full shared block grown", "no copy"] > 10 and seen["full shared block grown", "refused"] > 10
    assert seen["sharer released"] > 50 and seen["queued copy dropped"] > 5


def test_the_stub_a_chapter_2_file_and_an_unwritten_fork_say_so(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    stub = '''
from pagedkv_edu.core.block_manager import ManagerBase


class BlockManager(ManagerBase):
    def admit(self, seq, num_new_tokens, hit=None):
        raise NotImplementedError("your turn")

    def grow(self, seq, num_new_tokens):
        raise NotImplementedError("your turn")

    def release(self, seq):
        raise NotImplementedError("your turn")

    def fork(self, parent, child):
        raise NotImplementedError("your turn")
'''
    path = _save_manager(tmp_path, stub)
    assert check_sharing_manager(path) is False
    assert capsys.readouterr().out == (f"○ {SHARING}: not solved yet (admit is not written yet: it raises "
                                       "NotImplementedError). Write your version above and run the cell again.\n")
    _save_manager(tmp_path, Path(chapter2_solution.__file__).read_text())
    assert check_block_manager(path) is True and why_not_passed(path, "2") is None
    capsys.readouterr()
    assert check_sharing_manager(path) is False
    out = capsys.readouterr().out
    assert out.startswith(f"✗ {SHARING}: failed") and "defines no fork: it is chapter 2's manager" in out
    assert why_not_passed(path, "2") is None           # chapter 2's pass stands: the file did not change
    _save_manager(tmp_path, SHARING_WRONG_HEADER + "\n    def fork(self, parent, child):\n"
                                                   "        raise NotImplementedError\n")
    assert check_sharing_manager(path) is False
    assert capsys.readouterr().out.startswith(f"○ {SHARING}: not solved yet (fork is not written yet")
    assert check_sharing_manager(tmp_path / "nowhere.py") is False
    assert "nowhere.py does not exist: run the %%writefile cell above" in capsys.readouterr().out


def test_try_sharing_manager_returns_every_call_with_both_answers(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = _save_manager(tmp_path, SHARING_WRONG_HEADER + SHARING_WRONG["the copy is not queued"][0])
    tried = try_sharing_manager(path, 0)
    assert capsys.readouterr().out == "" and tried["case"] == SHARING_CASES[0].name
    calls = {c["call"]: c for c in tried["calls"]}
    assert calls["grow('r0.1', 1)"]["yours"] == [2] and calls["grow('r0.1', 1)"]["expected"] == [2]
    assert calls["grow('r0.1', 1)"]["your_copies"] == [] and calls["grow('r0.1', 1)"]["expected_copies"] == [(1, 2)]
    assert calls["fork('r0', 'r0.3')"]["expected_shared"] == {0: 4, 1: 4}
    assert calls["take_copies()"]["expected"] == [(1, 2), (1, 3), (1, 4)]


# --- a passing file runs the engine's parallel sampling and beam search --------------------------------
@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random")


def _sample_and_search(tiny, engine) -> tuple:
    """n = 3 seeded samples over a prompt that ends inside a block (each sample's first token copies it), then a
    beam search of 3: the tokens, every step's block tables, the copies."""
    prompt = list(range(5, 16))              # 11 tokens, blocks of 4: the last block is partly filled
    sampling = engine()
    sampling.add_request(prompt, SamplingParams(max_tokens=6, temperature=0.8, seed=7, n=3, ignore_eos=True))
    tables, copies, samples = [], [], []
    while sampling.has_unfinished:
        for out in sampling.step():
            samples = [c.token_ids for c in out.completions]
        tables.append({k: t.block_ids for k, t in sampling.memory.tables.items()})
        copies.append(sampling.last_step.copies.copy)
    beams = beam_search(engine(), prompt, BeamSearchParams(num_beams=3, max_tokens=6, ignore_eos=True))
    return samples, tables, copies, beams.token_ids, [f.tables for f in beams.frames], beams.num_copies


def test_a_passing_file_serves_samples_and_beams_as_the_shipped_engine(tiny, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = _save_manager(tmp_path, SHARING_RIGHT["from scratch: ceil, a block at a time, copies filtered in a loop"])
    assert check_sharing_manager(path) is True
    parts = load_parts(tmp_path / "my_engine", quiet=True)
    assert parts.card.yours == ["block_manager"] and parts.manager_class.__module__.startswith("reader_")
    settings = dict(kv_budget_tokens=64 * 4, block_size=4, max_seq_len=64)
    yours = _sample_and_search(tiny, lambda: parts.engine(tiny.model, tiny.tokenizer, **settings))
    shipped = _sample_and_search(tiny, lambda: LLMEngine(tiny.model, tiny.tokenizer, **settings))
    assert yours == shipped
    samples, tables, copies, _, frames, num_copies = shipped
    assert len({tuple(s) for s in samples}) == 3 and len(samples[0]) == 6
    assert sum(map(len, copies)) == 2 and num_copies > 0          # two samples copy the prompt's last block
    assert len(tables[1]) == 3 and len({tuple(ids[:2]) for ids in tables[1].values()}) == 1   # the prompt shared


def test_a_chapter_2_file_is_stopped_inside_the_engine_when_a_request_forks(
        tiny, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mark_passed(_save_manager(tmp_path, Path(chapter2_solution.__file__).read_text()))   # chapter 2's, passed
    parts = load_parts(tmp_path / "my_engine", quiet=True)
    engine = parts.engine(tiny.model, tiny.tokenizer, kv_budget_tokens=64 * 4, block_size=4, max_seq_len=64)
    assert engine.generate([list(range(5, 16))], SamplingParams(max_tokens=3), use_tqdm=False)[0].completions
    with pytest.raises(PartError, match=r"^your block manager \(my_engine/block_manager\.py\): fork\(1, 'r1\.1'\) "
                                        r"raised ValueError: .*needs fork \(chapter 7\)"):
        engine.generate([list(range(5, 16))], SamplingParams(max_tokens=3, n=3), use_tqdm=False)


def test_the_chapters_engine_path_runs_the_solution_file_as_the_shipped_engine(tiny, tmp_path: Path) -> None:
    """Your turn 3's cells on the tiny model: the solution saved and marked passed is the manager load_parts gives
    parts.engine, and sample_and_search finds the shipped engine's samples, tables, copies and beams on it."""
    from pagedkv_edu.core.block_table import blocks_needed
    from pagedkv_edu.exercises.ch7 import sample_and_search, search_of

    mark_passed(_save_manager(tmp_path, Path(sharing_solution.__file__).read_text()))
    parts = load_parts(tmp_path / "my_engine", quiet=True)
    assert parts.card.yours == ["block_manager"]
    prompt = list(range(5, 16))                          # 11 tokens in blocks of 4: the last block is partly filled
    settings = dict(kv_budget_tokens=64 * 4, block_size=4, max_seq_len=64)
    three = SamplingParams(n=3, max_tokens=6, temperature=0.8, seed=7, ignore_eos=True)
    beams = BeamSearchParams(num_beams=3, max_tokens=6, ignore_eos=True)
    yours = sample_and_search(lambda: parts.engine(tiny.model, tiny.tokenizer, **settings), prompt, three, beams)
    shipped = sample_and_search(lambda: LLMEngine(tiny.model, tiny.tokenizer, **settings), prompt, three)
    shipped_search = search_of(beam_search(LLMEngine(tiny.model, tiny.tokenizer, **settings), prompt, beams))
    assert yours.manager.startswith("reader_block_manager_") and yours.manager.endswith(".BlockManager")
    assert shipped.manager == "pagedkv_edu.core.block_manager.BlockManager" and shipped.beam is None
    assert yours.sampling == shipped.sampling and len({tuple(s) for s in yours.samples}) == 3
    assert yours.search == shipped_search and len(yours.beam) == 6
    fork = yours.fork_step                               # the prefill forks the samples: the prompt's blocks held once
    assert fork == 0 and len(yours.shared) == blocks_needed(len(prompt), 4) == yours.held[fork] == 3
    assert len(yours.copies[fork + 1]) == 2 and {src for src, _ in yours.copies[fork + 1]} == {yours.shared[-1]}
    assert yours.beam_copies > 0


def test_keep_chapter_2_manager_keeps_a_passed_chapter_2_file_only(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from pagedkv_edu.exercises.ch7 import keep_chapter_2_manager

    path = tmp_path / "my_engine" / "block_manager.py"
    assert keep_chapter_2_manager(path) is None and "no chapter-2 manager to keep" in capsys.readouterr().out
    chapter_2 = Path(chapter2_solution.__file__).read_text()
    mark_passed(_save_manager(tmp_path, chapter_2))
    kept = keep_chapter_2_manager(path)
    assert kept == path.with_name("block_manager_chapter2.py") and kept.read_text() == chapter_2
    out = capsys.readouterr().out
    assert out.startswith("your chapter-2 manager passed") and "def admit(" in out
    _save_manager(tmp_path, "raise NotImplementedError\n")      # the chapter-7 stub over it: the copy is shown again
    assert keep_chapter_2_manager(path) == kept and "kept earlier" in capsys.readouterr().out
    mark_passed(_save_manager(tmp_path, Path(sharing_solution.__file__).read_text()))   # a chapter-7 file: not kept
    assert keep_chapter_2_manager(path) is None and "already a chapter-7 file" in capsys.readouterr().out
    assert kept.read_text() == chapter_2


# --- in zh-TW: every line the graders print is translated ----------------------------------------------------
def _not_yet(*args):
    raise NotImplementedError("your turn")


ZH_FAILED, ZH_NOT_SOLVED = "：未通過", "：尚未作答"


def _zh_verdict(out: str, name: str) -> None:
    assert out.startswith((f"✗ {name}{ZH_FAILED}", f"○ {name}{ZH_NOT_SOLVED}")), out
    assert untranslated(out) == [], out


@pytest.mark.parametrize("name", [*COW_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_cow_checker_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    def crashes_on_a_copy(t, n, b, refs, free):
        if n % b and refs[t[-1]] > 1:
            raise KeyError("copy")
        return append_with_cow(t, n, b, refs, free)

    wrong = {**COW_WRONG, "raises": crashes_on_a_copy, "stub": _not_yet}[name]
    assert check_append_with_cow(wrong) is False
    _zh_verdict(capsys.readouterr().out, "append_with_cow（寫入時複製）")


@pytest.mark.parametrize("name", [*BEAM_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_beam_checker_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = {**BEAM_WRONG, "raises": lambda tables, refs, free, parents: tables[len(tables)], "stub": _not_yet}[name]
    assert check_regroup_beams(wrong) is False
    _zh_verdict(capsys.readouterr().out, "regroup_beams（束搜尋的分岔與釋放）")


@pytest.mark.usefixtures("zh_tw")
def test_cow_and_beam_hints_in_zh_tw(capsys: pytest.CaptureFixture[str]) -> None:
    check_append_with_cow(_never_copies)
    out = capsys.readouterr().out
    assert ("child 把 token 6（區塊大小 4）附加到區塊表 [0, 1]，此時引用計數 [2, 2, 0, 0, 0, 0]，"
            "空閒清單 [2, 3, 4, 5]：") in out
    assert "複製：應為 (1, 2)，得到 None（區塊 1 是共享的，引用計數為 2，4 個 token 的空間只存了 2 個" in out
    assert "槽位：應為 10，得到 6（區塊 1 是共享的：其他序列也會看到這個 token）" in out
    check_regroup_beams(_fork_without_a_reference)
    assert "是分岔出來的：父束區塊表中的每個區塊都多一個引用" in capsys.readouterr().out


@pytest.mark.usefixtures("zh_tw")
def test_saving_prediction_in_zh_tw(capsys: pytest.CaptureFixture[str]) -> None:
    from pagedkv_edu.exercises.ch7 import check_saving_prediction

    assert check_saving_prediction(21, 10.2) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ 共享省下的記憶體（memory saved by sharing）：") and "下一個儲存格會說明其中的差距" in out


ZH_SHARING = "BlockManager（分岔與寫入時複製）"


@pytest.mark.parametrize("name", SHARING_WRONG)
@pytest.mark.usefixtures("zh_tw")
def test_the_sharing_grader_explains_in_zh_tw(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_sharing_manager(_save_manager(tmp_path, SHARING_WRONG_HEADER + SHARING_WRONG[name][0])) is False
    _zh_verdict(capsys.readouterr().out, ZH_SHARING)


@pytest.mark.usefixtures("zh_tw")
def test_the_sharing_grader_stub_chapter_2_file_and_hints_in_zh_tw(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = _save_manager(tmp_path, SHARING_WRONG_HEADER + "\n    def fork(self, parent, child):\n"
                                                          "        raise NotImplementedError\n")
    assert check_sharing_manager(path) is False
    out = capsys.readouterr().out
    assert out.startswith(f"○ {ZH_SHARING}{ZH_NOT_SOLVED}（fork 還沒寫：它引發 NotImplementedError）") and \
        untranslated(out) == [], out
    _save_manager(tmp_path, Path(chapter2_solution.__file__).read_text())
    assert check_sharing_manager(path) is False
    out = capsys.readouterr().out
    assert "沒有定義 fork：它是第 2 章的管理器" in out and untranslated(out) == [], out
    _save_manager(tmp_path, SHARING_WRONG_HEADER + SHARING_WRONG["copy-on-write writes in place"][0])
    assert check_sharing_manager(path) is False
    out = capsys.readouterr().out
    assert ("區塊 1 是共享的（引用計數 4），4 個槽位只存了 2 個 token：把 'r0.1' 的新 token 寫進去，"
            "其他序列也會看到它") in out, out
    assert "它的最後一個區塊 1 是共享的，引用計數 4，4 個槽位已填 2 個" in out, out
    _save_manager(tmp_path, SHARING_WRONG_HEADER + '''
    def grow(self, seq, n):
        table, start, size = self.held[seq], seq.num_computed_tokens, self.block_size
        if n and start & (size - 1) and self.pool.ref_counts[table[-1]] > 1:
            return Solution.grow(self, seq, n)
        return Chapter2.grow(self, seq, n)
''')
    assert check_sharing_manager(path) is False         # a hidden run: chapter 2's report, with the shared blocks
    out = capsys.readouterr().out
    assert "隱藏案例" in out and "，共享的區塊（引用計數）{" in out and untranslated(out) == [], out


@pytest.mark.usefixtures("zh_tw")
def test_keep_chapter_2_manager_speaks_zh_tw(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pagedkv_edu.exercises.ch7 import keep_chapter_2_manager

    assert keep_chapter_2_manager(tmp_path / "my_engine" / "block_manager.py") is None
    out = capsys.readouterr().out
    assert out.startswith("沒有第 2 章的管理器可以保留") and untranslated(out) == [], out
