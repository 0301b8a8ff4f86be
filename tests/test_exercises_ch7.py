"""Chapter 7's grader accepts right answers in any style, rejects the usual wrong ones, and says why."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.prefix_cache import PrefixHit
from pagedkv_edu.core.request import Request
from pagedkv_edu.exercises.ch7 import COW_CASES, HIDDEN_COW_CASES, _ref_counts, check_append_with_cow, try_append_with_cow
from pagedkv_edu.exercises.solutions.ch7 import append_with_cow


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
