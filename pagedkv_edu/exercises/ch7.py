"""Graders for chapter 7 (sharing blocks): copy-on-write, and beam search's fork and free.

Copy-on-write's cases catch copying a block nobody else holds, copying a *full* shared block
(a new block is enough), a reference to the shared block kept, and a write into it anyway.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from ..checks import check_whole
from .ch2 import HIDDEN_BLOCK_SIZES, explain_slot, growth_hint, random_table
from .grading import Raised, Reader, as_int, as_int_list, grade, seeded, short
from .predict import check_prediction
from .solutions import ch7 as reference


# --- copy-on-write ------------------------------------------------------------------------------
@dataclass(frozen=True)
class CowCase:
    """Several sequences' tables into one pool; ``appends`` names who appends, in order."""

    name: str
    block_size: int
    tables: tuple[tuple[str, tuple[int, ...], int], ...]   # (sequence, block table, tokens)
    free_blocks: tuple[int, ...]
    appends: tuple[str, ...]
    num_blocks: int


COW_CASES: tuple[CowCase, ...] = (
    CowCase("a 6-token prompt forked in two (block size 4): the child appends, then the parent",
            4, (("parent", (0, 1), 6), ("child", (0, 1), 6)), (2, 3, 4, 5), ("child", "parent", "child"), 6),
    CowCase("a full shared last block: a new block is enough, nothing to copy",
            4, (("parent", (3, 5), 8), ("child", (3, 5), 8)), (0, 1, 2, 4), ("child", "parent"), 6),
    CowCase("three samples share a 2-token block of 4; each appends once",
            4, (("s0", (7,), 2), ("s1", (7,), 2), ("s2", (7,), 2)), (1, 2, 3), ("s0", "s1", "s2", "s2"), 8),
    CowCase("nobody else holds the block: append in place",
            4, (("alone", (2,), 1),), (0, 1), ("alone", "alone", "alone", "alone"), 3),
)


def _ref_counts(case: CowCase | BeamCase) -> list[int]:
    """How many of the case's tables hold each block: the reference counts it starts from."""
    counts = [0] * case.num_blocks
    for table in case.tables:
        for block in table if isinstance(case, BeamCase) else table[1]:
            counts[block] += 1
    return counts


def _cow_start(case: CowCase) -> tuple[dict[str, list[int]], list[int], list[int]]:
    """The tables, reference counts and free list a copy-on-write case starts from, as fresh lists."""
    return ({s: list(t) for s, t, _ in case.tables}, _ref_counts(case),
            list(case.free_blocks))


def _draw_cow_case(rng: random.Random, i: int) -> CowCase:
    """A parent forked into one or two children (sometimes next to an unrelated sequence), then random appends."""
    b = rng.choice(HIDDEN_BLOCK_SIZES)
    n = rng.choice([1, b, b + 1, 2 * b, rng.randint(1, 3 * b)])
    names = ["parent"] + [f"child{k + 1}" for k in range(rng.randint(1, 2))]
    other = rng.choice([0, 0, rng.randint(1, 2 * b)])
    appends = tuple(rng.choice(names + (["other"] if other else [])) for _ in range(rng.randint(3, 8)))
    used = -(-n // b) + -(-other // b)
    num_blocks = used + len(appends) + rng.randint(0, 2)
    ids = random_table(rng, num_blocks, num_blocks)
    parent = tuple(ids[: -(-n // b)])
    mine = tuple(ids[len(parent):used])
    tables = tuple((name, parent, n) for name in names) + ((("other", mine, other),) if other else ())
    return CowCase(f"hidden case {i + 1}", b, tables, tuple(ids[used:]), appends, num_blocks)


HIDDEN_COW_CASES = seeded(80, 9, _draw_cow_case)


def _as_copy(x: object) -> tuple[int, int] | None | str:
    """The copy as (source, destination), None, or the text of what it is instead."""
    if x is None:
        return None
    pair, _ = as_int_list(x) if isinstance(x, (tuple, list)) else (None, "")
    return (pair[0], pair[1]) if pair is not None and len(pair) == 2 else short(x)


def _run_cow(fn: Reader, case: CowCase) -> list[str]:
    b = case.block_size
    exp, got = _cow_start(case), _cow_start(case)
    lengths = {s: n for s, _, n in case.tables}
    for seq in case.appends:
        n = lengths[seq]
        before = (list(got[0][seq]), list(got[1]), list(got[2]))
        step = (f"{seq} appends token {n} (block size {b}) to table {before[0]}, "
                f"ref counts {before[1]}, free list {before[2]}")
        exp_slot, exp_copy = reference.append_with_cow(exp[0][seq], n, b, exp[1], exp[2])
        try:
            result = fn(got[0][seq], n, b, got[1], got[2])
        except Raised as exc:
            return [f"{step}: {exc}"]
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            return [f"{step}: expected (slot, copy), got {short(result)}"]
        got_slot, got_copy = as_int(result[0]), _as_copy(result[1])
        lengths[seq] += 1
        diff = []
        last = before[0][-1] if before[0] else None
        if got_copy != exp_copy:
            why = ""
            if exp_copy is None and before[0] and n % b == 0:
                why = (f"  (token {n} is a multiple of the block size {b}: the last block is full and never written "
                       f"again, so a new block is enough and nothing needs copying)")
            elif exp_copy is None and last is not None and before[1][last] == 1:
                why = f"  (nobody else holds block {last}: append in place)"
            elif exp_copy is not None:
                why = (f"  (block {last} is shared, ref count {before[1][last]}, and holds only {n % b} of {b} "
                       f"tokens: the new token must go into a copy)")
            diff.append(f"copy: expected {exp_copy}, got {got_copy}{why}")
        table = [as_int(x) for x in got[0][seq]]
        if got_slot != exp_slot:
            shared = got_slot // b if got_slot is not None else None
            cause = explain_slot(got_slot, exp[0][seq], n, b) if table == exp[0][seq] else None
            note = (f"  (block {shared} is shared: the other sequences would see this token)"
                    if shared is not None and 0 <= shared < case.num_blocks and before[1][shared] > 1 else "")
            if cause:
                note = f"  ({cause})"
            diff.append(f"slot: expected {exp_slot}, got {short(result[0])}{note}")
        if table != exp[0][seq]:
            diff.append(f"{seq}'s block table: expected {exp[0][seq]}, got {got[0][seq]}")
            diff += growth_hint(before[0], table, exp[0][seq], n, b)
        if [as_int(x) for x in got[1]] != exp[1]:
            wrong = [k for k, (e, g) in enumerate(zip(exp[1], got[1])) if e != g]
            diff.append(f"reference counts: expected {exp[1]}, got {got[1]} (blocks {wrong} differ)")
        if [as_int(x) for x in got[2]] != exp[2]:
            diff.append(f"free list: expected {exp[2]}, got {got[2]}")
        if diff:   # later steps start from a wrong state; the first difference is the lesson
            return [f"{step}:"] + ["  " + line for line in diff]
    return []


def check_append_with_cow(fn: Callable[[list[int], int, int, list[int], list[int]],
                                       tuple[int, tuple[int, int] | None]]) -> bool:
    """Grade ``fn(block_table, num_tokens, block_size, ref_counts, free_blocks) -> (slot, copy)``.

    ``fn`` stores token number ``num_tokens`` and must update the table, the reference counts
    and the free list in place, returning the slot and the ``(source, destination)`` copy or None.
    """
    return grade("append_with_cow（寫入時複製）", fn, COW_CASES, HIDDEN_COW_CASES, _run_cow)


def try_append_with_cow(fn: Callable[[list[int], int, int, list[int], list[int]],
                                     tuple[int, tuple[int, int] | None]], case: int = 0) -> list[dict[str, object]]:
    """Run ``fn`` on shown case number ``case`` (0-3) and return every append: inputs, then outputs.

    No verdict: read what your function did to the table, the reference counts and the free
    list, step by step (it stops at the first exception and returns it as the last step's result).
    """
    chosen = COW_CASES[check_whole("case", case, 0, len(COW_CASES) - 1)]
    tables, refs, free = _cow_start(chosen)
    lengths = {s: n for s, _, n in chosen.tables}
    steps: list[dict[str, object]] = []
    for seq in chosen.appends:
        step: dict[str, object] = {"sequence": seq, "num_tokens": lengths[seq], "block_table": list(tables[seq]),
                                   "ref_counts": list(refs), "free_blocks": list(free)}
        try:
            step["result"] = fn(tables[seq], lengths[seq], chosen.block_size, refs, free)
        except Exception as exc:   # the reader's code: show what it raised, do not crash
            step["result"] = exc
            steps.append(step)
            break
        step.update(block_table_after=list(tables[seq]), ref_counts_after=list(refs), free_blocks_after=list(free))
        lengths[seq] += 1
        steps.append(step)
    return steps


# --- beam search: fork and free -----------------------------------------------------------------
@dataclass(frozen=True)
class BeamCase:
    """The live beams' block tables (best first) and the parent each new beam continues."""

    name: str
    tables: tuple[tuple[int, ...], ...]
    parents: tuple[int, ...]
    num_blocks: int


BEAM_CASES: tuple[BeamCase, ...] = (
    BeamCase("four beams: beam 0 has three children, beam 1 one, beams 2 and 3 lose",
             ((0, 1, 2), (0, 1, 3), (0, 1, 4), (0, 1, 5)), (0, 0, 1, 0), 8),
    BeamCase("every beam continues itself: nothing changes", ((6, 2), (6, 4), (6, 1)), (0, 1, 2), 8),
    BeamCase("the loser shares both its blocks with the winner: they only lose a reference",
             ((7, 3), (7, 3), (7, 9)), (0, 0, 2), 10),
    BeamCase("one beam", ((4, 0, 2),), (0,), 5),
)


def _beam_start(case: BeamCase) -> tuple[list[list[int]], list[int], list[int]]:
    """The tables, reference counts and free list a beam case starts from, as fresh lists."""
    held = {b for t in case.tables for b in t}
    return ([list(t) for t in case.tables], _ref_counts(case),
            [b for b in range(case.num_blocks) if b not in held])


def _draw_beam_case(rng: random.Random, i: int) -> BeamCase:
    """Beams that share a prompt and parts of their outputs, in a pool of scattered block ids."""
    k = rng.randint(1, 6)
    num_blocks = rng.randint(16, 40)
    ids = iter(random_table(rng, num_blocks, num_blocks))
    prompt = [next(ids) for _ in range(rng.randint(1, 3))]
    tables = [prompt + [next(ids) for _ in range(rng.randint(0, 2))]]
    for _ in range(k - 1):
        other = rng.choice(tables)
        cut = rng.randint(len(prompt), len(other))
        tables.append(other[:cut] + [next(ids) for _ in range(rng.randint(0, 2))])
    parents = tuple(rng.choice([rng.randrange(k), 0]) for _ in range(k))
    return BeamCase(f"hidden case {i + 1}", tuple(map(tuple, tables)), parents, num_blocks)


HIDDEN_BEAM_CASES = seeded(80, 11, _draw_beam_case)


def _run_beams(fn: Reader, case: BeamCase) -> list[str]:
    exp_tables, exp_refs, exp_free = _beam_start(case)
    expected = reference.regroup_beams(exp_tables, exp_refs, exp_free, list(case.parents))
    tables, refs, free = _beam_start(case)
    before = f"tables {tables}, parents {list(case.parents)}, ref counts {refs}"
    got = fn(tables, refs, free, list(case.parents))
    if not isinstance(got, (list, tuple)) or len(got) != len(case.parents):
        return [before, f"expected a list of {len(case.parents)} block tables (one per new beam), got {short(got)}"]
    tables = []
    for table in got:
        values, problem = as_int_list(table, "block id")
        if values is None:
            return [before, problem]
        tables.append(values)
    lines = []
    if tables != expected:
        lines.append(f"new tables: expected {expected}, got {tables}")
    same = [(i, j) for i in range(len(got)) for j in range(i) if got[i] is got[j]]
    if same and not lines:
        i, j = same[0]
        lines.append(f"new beams {j} and {i} are the same list object: appending a token to one would change the "
                     f"other; a fork needs its own copy of the parent's table")
    got_refs = [as_int(x) for x in refs]
    if got_refs != exp_refs:
        wrong = [b for b, (e, g) in enumerate(zip(exp_refs, got_refs)) if e != g]
        lines.append(f"reference counts: expected {exp_refs}, got {list(refs)} (blocks {wrong} differ)")
        if any(g is not None and g < exp_refs[b] for b, g in enumerate(got_refs)):
            lines.append("  (a parent's second, third ... child is a fork: every block of the parent's table gains "
                         "a reference; a block shared with a surviving beam keeps that beam's reference)")
        if any(g is not None and g > exp_refs[b] for b, g in enumerate(got_refs)):
            lines.append("  (every block of a beam nobody continues loses a reference; a parent's first child is "
                         "the parent itself and adds none)")
    free_ids = [as_int(x) for x in free]
    if None in free_ids or sorted(free_ids) != sorted(exp_free):
        lines.append(f"free blocks (any order): expected {sorted(exp_free)}, got {short(list(free))}"
                     f"  (a block is free when its count reaches 0, and only then)")
    return [before] + lines if lines else []


def check_regroup_beams(fn: Callable[[list[list[int]], list[int], list[int], list[int]], list[list[int]]]) -> bool:
    """Grade ``fn(tables, ref_counts, free_blocks, parents) -> new tables`` (counts and free list in place)."""
    return grade("regroup_beams（束搜尋的分岔與釋放）", fn, BEAM_CASES, HIDDEN_BEAM_CASES, _run_beams)


def try_regroup_beams(fn: Callable[[list[list[int]], list[int], list[int], list[int]], list[list[int]]],
                      case: int = 0) -> dict[str, object]:
    """Run ``fn`` on shown case number ``case`` (0-3); return its inputs and what it returned and changed."""
    chosen = BEAM_CASES[check_whole("case", case, 0, len(BEAM_CASES) - 1)]
    tables, refs, free = _beam_start(chosen)
    out: dict[str, object] = {"tables": [list(t) for t in tables], "parents": list(chosen.parents),
                              "ref_counts": list(refs), "free_blocks": list(free)}
    try:
        out["result"] = fn(tables, refs, free, list(chosen.parents))
    except Exception as exc:   # the reader's code: show what it raised, do not crash
        out["result"] = exc
    out.update(ref_counts_after=list(refs), free_blocks_after=list(free))
    return out


# --- predict, then run ----------------------------------------------------------------------------
def check_saving_prediction(predicted_percent: float | None, measured_percent: float, *,
                            tolerance: float = 3.0) -> bool:
    """Say whether the reader's predicted saving (in percent) is within ``tolerance`` points of the measured one."""
    return check_prediction("memory saved by sharing", "共享省下的記憶體", predicted_percent, measured_percent,
                            tolerance=tolerance, absolute=True, unit="%", why="the next cell explains the difference")
