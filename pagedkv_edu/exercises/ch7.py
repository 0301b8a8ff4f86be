"""Graders for chapter 7 (sharing blocks): copy-on-write, beam search's fork and free, and the reader's manager.

Copy-on-write's cases catch copying a block nobody else holds, copying a *full* shared block
(a new block is enough), a reference to the shared block kept, and a write into it anyway.
The reader's block manager file (``my_engine/block_manager.py``, chapter 2's methods and
``fork``, with copy-on-write in ``grow``) is graded by chapter 2's machinery, call by call
against the package's manager, with forks, sharers growing in turn, and the queued copies
compared too. When it passes, the engine's parallel sampling and beam search run on it
(:func:`sample_and_search`, run on your manager and on the shipped one, and compared).
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from ..checks import check_whole
from ..core.block_manager import ManagerBase
from ..core.block_pool import OutOfBlocksError
from ..core.request import Request, SamplingParams
from ..engine.beam import BeamSearchParams, beam_search
from . import report
from .ch2 import (
    HIDDEN_BLOCK_SIZES,
    HIDDEN_SETTINGS,
    MANAGER_CASES,
    MANAGER_FILE,
    BrokenState,
    ManagerCase,
    ManagerPair,
    MemoryState,
    NotLoaded,
    Op,
    Step,
    admit,
    explain_slot,
    grow,
    growth_hint,
    hidden_machine,
    is_stub,
    load_manager_class,
    random_table,
    release,
    run_case,
    run_hidden,
)
from .grading import Raised, Reader, as_int, as_int_list, grade, seeded, short
from .messages import Message, tr
from .my_engine import mark_passed, why_not_passed
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
    CowCase(tr("a 6-token prompt forked in two (block size 4): the child appends, then the parent"),
            4, (("parent", (0, 1), 6), ("child", (0, 1), 6)), (2, 3, 4, 5), ("child", "parent", "child"), 6),
    CowCase(tr("a full shared last block: a new block is enough, nothing to copy"),
            4, (("parent", (3, 5), 8), ("child", (3, 5), 8)), (0, 1, 2, 4), ("child", "parent"), 6),
    CowCase(tr("three samples share a 2-token block of 4; each appends once"),
            4, (("s0", (7,), 2), ("s1", (7,), 2), ("s2", (7,), 2)), (1, 2, 3), ("s0", "s1", "s2", "s2"), 8),
    CowCase(tr("nobody else holds the block: append in place"),
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
    return CowCase(tr("hidden case {n}", n=i + 1), b, tables, tuple(ids[used:]), appends, num_blocks)


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
        step = tr("{seq} appends token {n} (block size {b}) to table {table}, ref counts {refs}, free list {free}",
                  seq=seq, n=n, b=b, table=before[0], refs=before[1], free=before[2])
        exp_slot, exp_copy = reference.append_with_cow(exp[0][seq], n, b, exp[1], exp[2])
        try:
            result = fn(got[0][seq], n, b, got[1], got[2])
        except Raised as exc:
            return [tr("{step}: {error}", step=step, error=exc.args[0])]
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            return [tr("{step}: expected (slot, copy), got {got}", step=step, got=short(result))]
        got_slot, got_copy = as_int(result[0]), _as_copy(result[1])
        lengths[seq] += 1
        diff: list[str] = []
        last = before[0][-1] if before[0] else None
        if got_copy != exp_copy:
            why: str = ""
            if exp_copy is None and before[0] and n % b == 0:
                why = tr("  (token {n} is a multiple of the block size {b}: the last block is full and never written "
                         "again, so a new block is enough and nothing needs copying)", n=n, b=b)
            elif exp_copy is None and last is not None and before[1][last] == 1:
                why = tr("  (nobody else holds block {last}: append in place)", last=last)
            elif exp_copy is not None:
                why = tr("  (block {last} is shared, ref count {count}, and holds only {used} of {b} tokens: the new "
                         "token must go into a copy)", last=last, count=before[1][last], used=n % b, b=b)
            diff.append(tr("copy: expected {expected}, got {got}{why}", expected=exp_copy, got=got_copy, why=why))
        table = [as_int(x) for x in got[0][seq]]
        if got_slot != exp_slot:
            shared = got_slot // b if got_slot is not None else None
            cause = explain_slot(got_slot, exp[0][seq], n, b) if table == exp[0][seq] else None
            note: str = (tr("  (block {block} is shared: the other sequences would see this token)", block=shared)
                         if shared is not None and 0 <= shared < case.num_blocks and before[1][shared] > 1 else "")
            if cause:
                note = tr("  ({cause})", cause=cause)
            diff.append(tr("slot: expected {expected}, got {got}{note}", expected=exp_slot, got=short(result[0]),
                           note=note))
        if table != exp[0][seq]:
            diff.append(tr("{seq}'s block table: expected {expected}, got {got}", seq=seq, expected=exp[0][seq],
                           got=list(got[0][seq])))
            diff += growth_hint(before[0], table, exp[0][seq], n, b)
        if [as_int(x) for x in got[1]] != exp[1]:
            wrong = [k for k, (e, g) in enumerate(zip(exp[1], got[1])) if e != g]
            diff.append(tr("reference counts: expected {expected}, got {got} (blocks {wrong} differ)", expected=exp[1],
                           got=list(got[1]), wrong=wrong))
        if [as_int(x) for x in got[2]] != exp[2]:
            diff.append(tr("free list: expected {expected}, got {got}", expected=exp[2], got=list(got[2])))
        if diff:   # later steps start from a wrong state; the first difference is the lesson
            return [tr("{step}:", step=step)] + [f"  {line}" for line in diff]
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
    BeamCase(tr("four beams: beam 0 has three children, beam 1 one, beams 2 and 3 lose"),
             ((0, 1, 2), (0, 1, 3), (0, 1, 4), (0, 1, 5)), (0, 0, 1, 0), 8),
    BeamCase(tr("every beam continues itself: nothing changes"), ((6, 2), (6, 4), (6, 1)), (0, 1, 2), 8),
    BeamCase(tr("the loser shares both its blocks with the winner: they only lose a reference"),
             ((7, 3), (7, 3), (7, 9)), (0, 0, 2), 10),
    BeamCase(tr("one beam"), ((4, 0, 2),), (0,), 5),
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
    return BeamCase(tr("hidden case {n}", n=i + 1), tuple(map(tuple, tables)), parents, num_blocks)


HIDDEN_BEAM_CASES = seeded(80, 11, _draw_beam_case)


def _run_beams(fn: Reader, case: BeamCase) -> list[str]:
    exp_tables, exp_refs, exp_free = _beam_start(case)
    expected = reference.regroup_beams(exp_tables, exp_refs, exp_free, list(case.parents))
    tables, refs, free = _beam_start(case)
    before = tr("tables {tables}, parents {parents}, ref counts {refs}", tables=[list(t) for t in tables],
                parents=list(case.parents), refs=list(refs))
    got = fn(tables, refs, free, list(case.parents))
    if not isinstance(got, (list, tuple)) or len(got) != len(case.parents):
        return [before, tr("expected a list of {count} block tables (one per new beam), got {got}",
                           count=len(case.parents), got=short(got))]
    tables = []
    for table in got:
        values, problem = as_int_list(table, tr("block id"))
        if values is None:
            return [before, problem]
        tables.append(values)
    lines = []
    if tables != expected:
        lines.append(tr("new tables: expected {expected}, got {got}", expected=expected, got=tables))
    same = [(i, j) for i in range(len(got)) for j in range(i) if got[i] is got[j]]
    if same and not lines:
        i, j = same[0]
        lines.append(tr("new beams {j} and {i} are the same list object: appending a token to one would change the "
                        "other; a fork needs its own copy of the parent's table", i=i, j=j))
    got_refs = [as_int(x) for x in refs]
    if got_refs != exp_refs:
        wrong = [b for b, (e, g) in enumerate(zip(exp_refs, got_refs)) if e != g]
        lines.append(tr("reference counts: expected {expected}, got {got} (blocks {wrong} differ)", expected=exp_refs,
                        got=list(refs), wrong=wrong))
        if any(g is not None and g < exp_refs[b] for b, g in enumerate(got_refs)):
            lines.append(tr("  (a parent's second, third ... child is a fork: every block of the parent's table "
                            "gains a reference; a block shared with a surviving beam keeps that beam's reference)"))
        if any(g is not None and g > exp_refs[b] for b, g in enumerate(got_refs)):
            lines.append(tr("  (every block of a beam nobody continues loses a reference; a parent's first child "
                            "is the parent itself and adds none)"))
    free_ids = [as_int(x) for x in free]
    if None in free_ids or sorted(free_ids) != sorted(exp_free):
        lines.append(tr("free blocks (any order): expected {expected}, got {got}  (a block is free when its count "
                        "reaches 0, and only then)", expected=sorted(exp_free), got=short(list(free))))
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
# A name, not a line: predict.py prints it beside the zh name (共享省下的記憶體（memory saved by sharing）).
SAVING_PREDICTION = "memory saved by sharing"   # en: not shown to readers as a sentence to translate


def check_saving_prediction(predicted_percent: float | None, measured_percent: float, *,
                            tolerance: float = 3.0) -> bool:
    """Say whether the reader's predicted saving (in percent) is within ``tolerance`` points of the measured one."""
    return check_prediction(SAVING_PREDICTION, "共享省下的記憶體", predicted_percent, measured_percent,
                            tolerance=tolerance, absolute=True, unit="%",
                            why=tr("the next cell explains the difference"))


# --- your block manager, with sharing (your turn 3): chapter 2's file grader, with fork and copy-on-write --------
SHARING_NAME: Message = tr("BlockManager: fork and copy-on-write（分岔與寫入時複製）")
SHARING_RUNS = 100   # hidden runs of the state machine (derandomized, as chapter 2's), forks among the calls
SHARING_STEPS = 40


@dataclass(frozen=True)
class ForkOp(Op):
    """``fork(parent, child)``, as the engine calls it: ``seq`` is the child, a new record with the parent's tokens."""

    parent: str = ""

    def text(self) -> str:
        return f"fork({self.parent!r}, {self.seq!r})"


@dataclass(frozen=True)
class TakeCopies(Op):
    """A step's end: the engine takes the queued copies (``take_copies()``) and makes them before the forward pass."""

    def text(self) -> str:
        return "take_copies()"


def fork(parent: str, child: str) -> ForkOp:
    return ForkOp("fork", child, parent=parent)


def take_copies() -> TakeCopies:
    return TakeCopies("take_copies", "")


SHARING_CASES: tuple[ManagerCase, ...] = (
    ManagerCase(tr("the chapter's demo: a 6-token prompt at block size 4 forked into three samples; each first "
                   "token copies block 1 but the last writer's, which finds it no longer shared"), 8, 4,
                tuple(range(8)),
                (admit("r0", 6, 6), fork("r0", "r0.1"), fork("r0", "r0.2"), fork("r0", "r0.3"), grow("r0.1", 1),
                 grow("r0", 1), grow("r0.2", 1), grow("r0.3", 1), take_copies(), grow("r0.3", 1), grow("r0.3", 1),
                 release("r0.1"), release("r0"), release("r0.2"), release("r0.3"))),
    ManagerCase(tr("a full shared last block: the next tokens go to new blocks, nothing is copied"), 6, 4,
                (3, 5, 0, 1, 2, 4),
                (admit("p", 8, 8), fork("p", "c"), grow("c", 1), grow("p", 1), take_copies(), release("p"),
                 release("c"))),
    ManagerCase(tr("beams that regroup: fork the beam chosen twice, grow every beam (copy-on-write), free the loser"),
                10, 4, tuple(range(10)),
                (admit("b0", 5, 5), fork("b0", "b1"), grow("b0", 1), grow("b1", 1), take_copies(), release("b0"),
                 fork("b1", "b2"), grow("b1", 1), grow("b2", 1), take_copies(), fork("b2", "b3"), grow("b1", 1),
                 grow("b2", 1), grow("b3", 1), take_copies(), release("b2"), release("b1"), release("b3"))),
    ManagerCase(tr("refusals: a write into a shared block needs a free block for the copy; refused (None), nothing "
                   "changes"), 4, 4, (0, 1, 2, 3),
                (admit("p", 6, 6), fork("p", "c"), admit("q", 8, 8), grow("c", 1), release("q"), admit("r", 4, 4),
                 grow("c", 3), grow("c", 1), grow("p", 1), take_copies(), release("c"), release("p"), release("r"))),
    ManagerCase(tr("a grow past the block's edge after a fork: the copy's fresh block first, then the new one; a "
                   "release drops the queued copy into the block it frees"), 8, 4, (5, 2, 7, 0, 1, 3, 4, 6),
                (admit("p", 6, 6), fork("p", "c"), grow("c", 5), grow("p", 2), release("c"), take_copies(),
                 release("p"))),
)


@dataclass
class SharedState(MemoryState):
    """A manager's state with the copies it queued for the next forward pass, each ``(source, destination)``."""

    copies: list[tuple[int, int]] = field(default_factory=list)


def _new_blocks(n: int) -> Message:
    """``1 new block``, ``2 new blocks``: a count of blocks a grow takes, in the reader's language."""
    return tr("{n} new block", n=n) if n == 1 else tr("{n} new blocks", n=n)


def _replaced(line: Any, old: str, new: str) -> Any:
    """``line`` with ``old`` replaced by ``new``: in a message's fields (so that it still renders in the reader's
    language), or in a plain string."""
    if isinstance(line, Message):
        return Message(line.template, **{k: _replaced(v, old, new) for k, v in line.fields.items()})
    if isinstance(line, str):
        return line.replace(old, new)
    if isinstance(line, list):
        return [_replaced(v, old, new) for v in line]
    return line


class SharingPair(ManagerPair):
    """Chapter 2's comparison, with forks, the step's end (``take_copies``) and the queued copies compared too.

    The grader plays the scheduler's part of a fork: the child is a new record with the parent's
    tokens and count (``Request.fork``); the manager gives it the parent's blocks.
    """

    def record(self, op: Op) -> Request:
        if isinstance(op, ForkOp) and op.seq not in self.records:
            parent = self.records[op.parent]
            child = parent.fork(op.seq, len(self.records))
            child.num_computed_tokens = parent.num_computed_tokens
            self.records[op.seq] = child
        return super().record(op)

    def arguments(self, op: Op, seq: Request) -> tuple[Any, ...]:
        return (self.records[op.parent], seq) if isinstance(op, ForkOp) else super().arguments(op, seq)

    def read(self, manager: ManagerBase) -> SharedState:
        state = super().read(manager)
        try:
            copies = [(int(src), int(dst)) for src, dst in manager.copies.copy]
        except (AttributeError, TypeError, ValueError) as exc:
            raise BrokenState(tr("self.copies.copy must be the list of queued (source, destination) block pairs, "
                                 "which the engine takes each step (take_copies); it holds {copies}",
                                 copies=short(manager.copies))) from exc
        return SharedState(state.tables, state.free_queue, state.ref_counts, copies)

    def do(self, op: Op) -> Step:
        if not isinstance(op, TakeCopies):
            return super().do(op)
        counts = {s.seq_id: s.num_computed_tokens for s in self.records.values()}
        before = self.read(self.expected)
        step = Step(op, 0, counts, before, [tuple(pair) for pair in self.expected.take_copies().copy], before)
        step.expected_state = self.read(self.expected)
        self.steps.append(step)
        try:
            step.yours = [(int(src), int(dst)) for src, dst in self.yours.take_copies().copy]
            step.your_state = self.read(self.yours)
        except BrokenState as exc:
            step.problems = [exc.args[0] if exc.args else str(exc)]
        except Exception as exc:   # noqa: BLE001 (only a reader's own take_copies or copies can fail here)
            step.problems = [tr("take_copies() {error}: ManagerBase's take_copies hands the engine self.copies and "
                                "starts an empty one; keep it", error=self.describe(exc))]
        else:
            if step.yours != step.expected:
                step.problems = [tr("take_copies() handed the engine {yours}, expected {expected}", yours=step.yours,
                                    expected=step.expected)]
        return step

    def compare(self, step: Step, before_yours: MemoryState) -> list[str]:
        op, yours = step.op, step.yours
        if isinstance(op, ForkOp) and not isinstance(yours, BaseException):
            step.yours = None          # fork answers nothing: what it returns is not read
        if op.kind == "grow" and isinstance(yours, OutOfBlocksError) and self.writes_shared(step):
            old = step.before.tables[op.seq]
            need = -(-(step.tokens_before + op.tokens) // self.case.block_size) - len(old)
            return [tr("{call} {error}", call=op.text(), error=self.describe(yours)),
                    tr("hint: the copy of block {block} takes a free block too: {seq!r} needs {need} and one for the "
                       "copy, {total} in all, and {free} are free. Count the copy's block before taking any, and "
                       "return None, changing nothing, when they do not fit", block=old[-1], seq=op.seq,
                       need=_new_blocks(need), total=need + 1, free=len(step.before.free_queue))]
        return super().compare(step, before_yours)

    def writes_shared(self, step: Step) -> bool:
        """Does this grow write into a shared, partly filled last block (so it needs a copy)?"""
        old = step.before.tables.get(step.op.seq, [])
        return (bool(old) and step.op.tokens > 0 and step.tokens_before % self.case.block_size != 0
                and step.before.ref_counts[old[-1]] > 1)

    def more_differences(self, step: Step) -> list[str]:
        mine, theirs = step.your_state, step.expected_state
        assert isinstance(mine, SharedState) and isinstance(theirs, SharedState)
        lines: list[str] = []
        if mine.copies != theirs.copies:
            lines.append(tr("queued copies (self.copies.copy): yours {yours}, expected {expected}",
                            yours=short(mine.copies, 70), expected=short(theirs.copies, 70)))
        if isinstance(step.op, ForkOp):
            held, parent, child = self.yours.held, self.records[step.op.parent], self.records[step.op.seq]
            if child in held and held.get(parent) is held[child]:
                lines.append(tr("{child!r}'s table is {parent!r}'s own list object, not a copy: when either grows, "
                                "the other's table changes too. Give the child a list of its own, with the same ids",
                                child=step.op.seq, parent=step.op.parent))
        return lines

    # --- the causes --------------------------------------------------------------------------------------
    def hint(self, step: Step, answer: list[int] | None, before_yours: MemoryState) -> str | None:
        if isinstance(step.op, ForkOp):
            return self.fork_hint(step)          # a fork answers None: chapter 2's refusal hints do not apply
        found = (self.grow_hint(step, answer) if step.op.kind == "grow"
                 else self.release_hint(step) if step.op.kind == "release" else None)
        return found or super().hint(step, answer, before_yours)

    def fork_hint(self, step: Step) -> str | None:
        op, mine, before = step.op, step.your_state, step.before
        assert isinstance(op, ForkOp) and isinstance(mine, SharedState) and isinstance(before, SharedState)
        table, theirs = before.tables[op.parent], mine.tables.get(op.seq)
        if theirs is None:
            return tr("{seq!r} holds no table after the fork: self.held must give the child's record its parent's "
                      "ids", seq=op.seq)
        fresh = [b for b in theirs if b not in table]
        if fresh or mine.copies != before.copies:
            what = (tr("the fork gave {seq!r} new blocks {fresh}", seq=op.seq, fresh=fresh) if fresh
                    else tr("the fork queued copies"))
            return tr("{what}: a child shares every block of its parent ({table}), each gaining a reference, and "
                      "nothing is copied at fork. A block is copied later, and only the one a write needs: a shared, "
                      "partly filled last block, when a sequence is about to write into it", what=what, table=table)
        if theirs == table and any(mine.ref_counts[b] < step.expected_state.ref_counts[b] for b in table):
            return tr("{seq!r} names blocks {table}, but their reference counts did not rise: every block a child "
                      "shares gains a reference (pool.incref). Without it, the first of the two to be released "
                      "frees blocks the other still reads, and the pool hands them to the next sequence",
                      seq=op.seq, table=table)
        return None

    def grow_hint(self, step: Step, answer: list[int] | None) -> str | None:
        op, mine, theirs, before = step.op, step.your_state, step.expected_state, step.before
        assert isinstance(mine, SharedState) and isinstance(theirs, SharedState) and isinstance(before, SharedState)
        old, size = before.tables.get(op.seq, []), self.case.block_size
        if not old or op.tokens == 0:
            return None
        last, holders, free = old[-1], before.ref_counts[old[-1]], len(before.free_queue)
        need = -(-(step.tokens_before + op.tokens) // size) - len(old)
        ours = mine.tables.get(op.seq, [])
        kept = mine.copies[:len(before.copies)] == before.copies
        copied = mine.copies[len(before.copies):] if kept else mine.copies
        swapped = len(ours) >= len(old) and ours[len(old) - 1] != last
        if answer is None and (copied or swapped or mine.ref_counts[last] != holders):
            return tr("it returned None, but the copy-on-write was already made (block {last}'s fresh copy taken, "
                      "its reference dropped, or the copy queued). A refusal changes nothing, a copy included: count "
                      "the copy's block with the new ones, compare with pool.num_free, and only then copy", last=last)
        if holders == 1:
            return tr("nobody else holds block {last} (reference count 1): {seq!r} writes into it in place. "
                      "Copy-on-write copies only a block another sequence also holds", last=last,
                      seq=op.seq) if copied or swapped else None
        if step.tokens_before % size == 0:
            return tr("{seq!r}'s last block {last} is full ({tokens} tokens, a multiple of {size}): the new tokens go "
                      "to new blocks and nobody writes block {last} again, so it stays shared and nothing is copied",
                      seq=op.seq, last=last, tokens=step.tokens_before, size=size) if copied or swapped else None
        # a write into a shared, partly filled last block
        if step.expected is None:
            return tr("{call} needs {need} and one more for the copy of block {last} (shared, reference count "
                      "{holders}): {total} > {free} free, so it is refused (None), taking nothing", call=op.text(),
                      need=_new_blocks(need), last=last, holders=holders, total=need + 1,
                      free=free) if answer is not None else None
        if answer is None:
            return tr("{call} needs {need} and one more for the copy of block {last}: {total} <= {free} free, so it "
                      "fits", call=op.text(), need=_new_blocks(need), last=last, total=need + 1, free=free)
        fresh = theirs.tables[op.seq][len(old) - 1]
        if not swapped:
            used = step.tokens_before % size
            filled = tr("{n} token", n=used) if used == 1 else tr("{n} tokens", n=used)
            if op.tokens == 1:
                return tr("block {last} is shared (reference count {holders}) and holds only {filled} of {size}: "
                          "writing {seq!r}'s new token into it shows it to the other sequences. First swap it in "
                          "{seq!r}'s table for a fresh block (the first id returned), drop {seq!r}'s reference to it, "
                          "and queue ({last}, fresh) in self.copies.copy: copy-on-write", last=last, holders=holders,
                          filled=filled, size=size, seq=op.seq)
            return tr("block {last} is shared (reference count {holders}) and holds only {filled} of {size}: "
                      "writing {seq!r}'s new tokens into it shows them to the other sequences. First swap it in "
                      "{seq!r}'s table for a fresh block (the first id returned), drop {seq!r}'s reference to it, "
                      "and queue ({last}, fresh) in self.copies.copy: copy-on-write", last=last, holders=holders,
                      filled=filled, size=size, seq=op.seq)
        if ours != theirs.tables[op.seq]:
            return None
        if mine.ref_counts[last] > theirs.ref_counts[last]:
            return tr("the copy took block {fresh}, but block {last} kept {seq!r}'s reference (yours {yours}, "
                      "expected {expected}): {seq!r} no longer holds it, so drop one reference (pool.free({last})), "
                      "or it is never freed", fresh=fresh, last=last, seq=op.seq, yours=mine.ref_counts[last],
                      expected=theirs.ref_counts[last])
        wanted = theirs.copies[len(before.copies):]
        if copied == [(dst, src) for src, dst in wanted]:
            return tr("a copy is (source, destination): from the shared block {last} into the fresh {fresh}",
                      last=last, fresh=fresh)
        if not copied:
            return tr("block {fresh} took block {last}'s place but holds none of its K/V yet: queue ({last}, {fresh}) "
                      "in self.copies.copy. The engine takes the queued copies (take_copies) and makes them before "
                      "the forward pass writes the new token", fresh=fresh, last=last)
        if answer != step.expected:
            return tr("grow returns the fresh block {fresh} first, then the blocks appended after it: the first new "
                      "id replaces the table's old last block", fresh=fresh) if fresh in answer else tr(
                      "the fresh block {fresh} is one of the ids the table gained: return it, first", fresh=fresh)
        return None

    def release_hint(self, step: Step) -> str | None:
        mine, theirs = step.your_state, step.expected_state
        assert isinstance(mine, SharedState) and isinstance(theirs, SharedState)
        stale = [pair for pair in mine.copies if pair not in theirs.copies and mine.ref_counts[pair[1]] == 0]
        if not stale or (mine.tables, mine.free_queue) != (theirs.tables, theirs.free_queue):
            return None
        src, dst = stale[0]
        return tr("the copy ({src}, {dst}) is still queued, but this release freed block {dst}: nobody reads that "
                  "copy, and block {dst} can be handed out again in this step, to a sequence whose own copy-on-write "
                  "fills it. A release drops the queued copies into the blocks it frees", src=src, dst=dst)

    # --- the report ----------------------------------------------------------------------------------------
    def call_detail(self, step: Step) -> str:
        op = step.op
        if isinstance(op, ForkOp):
            return tr(" ({parent!r} holds {tokens} tokens in {table}; {seq!r} is a new record with its tokens)",
                      parent=op.parent, tokens=step.counts_before[op.parent], table=step.before.tables.get(op.parent),
                      seq=op.seq)
        old = step.before.tables.get(op.seq, []) if op.kind == "grow" else []
        if not old or step.before.ref_counts[old[-1]] <= 1:
            return super().call_detail(step)
        # chapter 2's detail of a grow, " ('a' holds 6 tokens; room for 7)", with the shared last block in it
        size, count = self.case.block_size, step.before.ref_counts[old[-1]]
        used = step.tokens_before % size
        if used:
            return tr(" ({seq!r} holds {tokens} tokens; room for {room}; its last block {last} is shared, reference "
                      "count {count}, {used} of {size} slots filled)", seq=op.seq, tokens=step.tokens_before,
                      room=step.tokens_before + op.tokens, last=old[-1], count=count, used=used, size=size)
        return tr(" ({seq!r} holds {tokens} tokens; room for {room}; its last block {last} is shared, reference "
                  "count {count}, full)", seq=op.seq, tokens=step.tokens_before, room=step.tokens_before + op.tokens,
                  last=old[-1], count=count)

    def report(self, step: Step, where: str) -> list[str]:
        lines = super().report(step, where)
        for s in self.steps:        # a fork answers nothing: no "-> None" (which reads as a refusal)
            if isinstance(s.op, ForkOp):
                lines = [_replaced(line, f"{s.op.text()} -> None", s.op.text()) for line in lines]
        before = step.before
        assert isinstance(before, SharedState)
        shared = {b: c for b, c in enumerate(before.ref_counts) if c > 1}
        extra = ([tr("shared blocks (reference counts) {shared}", shared=shared)] if shared else []) + (
            [tr("queued copies {copies}", copies=before.copies)] if before.copies else [])
        # chapter 2's lines: the case, the pool, the earlier calls (if any), then "  before: ..."
        at = next((i for i, line in enumerate(lines) if line.startswith("  before: ")), 3 if self.steps[:-1] else 2)
        lines[at] = f"{lines[at]}" + "".join(f"{tr(', {item}', item=text)}" for text in extra)
        return lines


def sharing_machine(cls: type, path: Path) -> type[RuleBasedStateMachine]:
    """Chapter 2's state machine, compared by :class:`SharingPair`, with the calls sharing adds: forks, every holder
    of a shared last block growing in turn, sharers released, a pool crowded so that a copy is refused, step ends."""
    base = hidden_machine(cls, path, SharingPair)

    class Machine(base):    # type: ignore[misc, valid-type]
        def sharers(self) -> list[list[Request]]:
            """The live sequences grouped by the last block they share (two holders or more)."""
            groups: dict[int, list[Request]] = {}
            for seq in self.live():
                ids = self.pair.expected.block_ids(seq)
                if ids:
                    groups.setdefault(ids[-1], []).append(seq)
            return [group for group in groups.values() if len(group) > 1]

        def holders_of_shared(self) -> list[Request]:
            return [s for s in self.live() if max(self.pair.expected.ref_count_of(s), default=0) > 1]

        @precondition(lambda self: bool(self.live()))
        @rule(data=st.data())
        def fork_one(self, data: st.DataObject) -> None:
            """A held sequence forked: a request's next sample, or a beam chosen twice."""
            parent = data.draw(st.sampled_from(self.live()))
            self.next_id += 1
            self.do(fork(parent.seq_id, f"s{self.next_id - 1}"))

        @precondition(lambda self: bool(self.sharers()))
        @rule(data=st.data())
        def grow_sharers(self, data: st.DataObject) -> None:
            """A decode step over the holders of one shared last block, in any order: the last to write owns it."""
            group = data.draw(st.sampled_from(self.sharers()))
            tokens = data.draw(st.sampled_from((1, 1, 2, self.pair.case.block_size + 1)))
            for seq in data.draw(st.permutations(group)):
                if seq in self.pair.expected and seq.num_computed_tokens + tokens <= self.capacity:
                    self.do(grow(seq.seq_id, tokens))

        @precondition(lambda self: bool(self.holders_of_shared()))
        @rule(data=st.data())
        def release_sharer(self, data: st.DataObject) -> None:
            """A sequence that shares blocks finishes, or is preempted: the others keep them."""
            self.do(release(data.draw(st.sampled_from(self.holders_of_shared())).seq_id))

        def partly_filled_sharers(self) -> list[list[Request]]:
            size = self.pair.case.block_size
            return [group for group in self.sharers() if group[0].num_computed_tokens % size]

        @precondition(lambda self: self.pair.expected.pool.num_free > 0 and bool(self.partly_filled_sharers()))
        @rule()
        def crowd(self) -> None:
            """A new sequence takes every block an admission may, while sharers are about to copy: their copies are
            refused."""
            blocks = self.pair.expected.pool.num_free - (self.pair.case.watermark_blocks if self.live() else 0)
            if blocks > 0:
                self.next_id += 1
                tokens = blocks * self.pair.case.block_size
                self.do(admit(f"s{self.next_id - 1}", tokens, tokens))

        @precondition(lambda self: bool(self.pair.expected.copies.copy))
        @rule()
        def end_step(self) -> None:
            self.do(take_copies())

    return Machine


SHARING_SETTINGS = settings(HIDDEN_SETTINGS, max_examples=SHARING_RUNS, stateful_step_count=SHARING_STEPS)


def fork_is_stub(cls: type) -> bool:
    """Does ``cls``'s fork raise NotImplementedError on a first fork (its admit works)?"""
    case = MANAGER_CASES[0]
    try:
        manager = cls(case.pool(), None)
        parent = Request("a", None, num_prompt_tokens=7)
        if manager.admit(parent, 7) is None:
            return False
        parent.num_computed_tokens = 7
        child = parent.fork("b", 1)
        child.num_computed_tokens = 7
        manager.fork(parent, child)
    except NotImplementedError:
        return True
    except Exception:   # noqa: BLE001 (any other failure is graded, with its message)
        return False
    return False


def check_sharing_manager(path: str | Path = MANAGER_FILE) -> bool:
    """Grade the ``BlockManager`` in ``path`` (chapter 2's methods, fork, copy-on-write) against the package's.

    Chapter 2's cases and this chapter's (forks, copies, refusals that would need a copy), then
    seeded random calls with forks among them. After every call the answer, every table, the free
    queue, the reference counts and the queued copies must be the package's. When it passes, the
    file is marked passed and :func:`~pagedkv_edu.exercises.my_engine.load_parts` gives the engine
    your manager, for parallel sampling and beam search too, as long as the file is unchanged.
    """
    path = Path(path)
    try:
        cls = load_manager_class(path)
    except NotLoaded as exc:
        return report(SHARING_NAME, [], not_solved=str(exc)) if exc.stub else report(SHARING_NAME, [str(exc)])
    if is_stub(cls):
        return report(SHARING_NAME, [], not_solved=tr("{method} is not written yet: it raises NotImplementedError",
                                                      method="admit"))
    if getattr(cls, "fork", None) is ManagerBase.fork:
        return report(SHARING_NAME, [tr("{path} defines no fork: it is chapter 2's manager. Chapter 7's file is the "
                                        "whole manager: your admit, grow and release from chapter 2, fork, and "
                                        "copy-on-write in grow (the engine forks a request's samples and a search's "
                                        "beams)", path=path)])
    if fork_is_stub(cls):
        return report(SHARING_NAME, [], not_solved=tr("{method} is not written yet: it raises NotImplementedError",
                                                      method="fork"))
    cases = MANAGER_CASES + SHARING_CASES
    failing = [(case, lines) for case in cases if (lines := run_case(cls, case, path, case.name, SharingPair))]
    if failing:
        (_, lines), also = failing[0], [str(tr('"{case}"', case=case.name)) for case, _ in failing[1:]]
        return report(SHARING_NAME, lines + ([tr("also wrong: {cases}", cases=str(tr(", ")).join(also))] if also
                                             else []))
    hidden = run_hidden(cls, path, sharing_machine, SHARING_SETTINGS)
    if hidden:
        return report(SHARING_NAME, hidden)
    mark_passed(path)
    report(SHARING_NAME, [], shown=len(cases), hidden=SHARING_RUNS)
    marked = tr("{path} is marked passed: load_parts() now gives the engine your BlockManager, forks and copies "
                "included (until you change the file)", path=path)
    print(f"  {marked}")
    return True


def try_sharing_manager(path: str | Path = MANAGER_FILE, case: int | str = 0) -> dict[str, Any]:
    """Run one of this chapter's shown cases (by index or name) on your manager and the package's; no verdict.

    Returns the case and, for each call, your answer (or what your code raised) beside the expected
    one, and both managers' tables, reference counts of shared blocks and queued copies after it.
    The records advance as the package's manager answered.
    """
    chosen = (SHARING_CASES[check_whole("case", case, 0, len(SHARING_CASES) - 1)] if isinstance(case, int)
              else next(c for c in SHARING_CASES if c.name == case))
    pair = SharingPair(load_manager_class(path), chosen, path)
    calls = []
    for op in chosen.ops:
        step = pair.do(op)
        if step.problems and not isinstance(op, TakeCopies):   # they differ: the records go on as the package's
            pair.advance(step)
        mine, theirs = step.your_state, step.expected_state
        assert isinstance(theirs, SharedState)
        calls.append(dict(call=op.text(), yours=step.yours, expected=step.expected,
                          your_tables=None if mine is None else mine.tables, expected_tables=theirs.tables,
                          your_copies=None if not isinstance(mine, SharedState) else mine.copies,
                          expected_copies=theirs.copies,
                          expected_shared={b: c for b, c in enumerate(theirs.ref_counts) if c > 1},
                          your_shared=None if mine is None else {b: c for b, c in enumerate(mine.ref_counts) if c > 1}))
    return dict(case=chosen.name, pool=chosen.describe(), calls=calls)


# --- before the file is replaced: your chapter-2 manager, kept ----------------------------------------------------
def keep_chapter_2_manager(path: str | Path = MANAGER_FILE) -> Path | None:
    """Before chapter 7's ``%%writefile`` replaces ``path``: a copy of your passed chapter-2 manager, printed.

    Chapter 7's file is the whole manager, your chapter-2 methods in it. If ``path`` passed and defines
    no fork of its own (it is chapter 2's file), it is copied to ``block_manager_chapter2.py`` beside it;
    an earlier copy is shown again. Returns the copy's path, or None when there is none.
    """
    path = Path(path)
    copy = path.with_name(f"{path.stem}_chapter2{path.suffix}")
    why = why_not_passed(path, "2")
    if why is None:
        try:
            chapter_2 = getattr(load_manager_class(path), "fork", None) is ManagerBase.fork
        except NotLoaded:
            chapter_2 = False
        if not chapter_2:
            print(tr("{path} passed and defines fork: it is already a chapter-7 file. The next cell saves its own "
                     "text over it, so keep your version in that cell", path=path))
            return None
        shutil.copyfile(path, copy)
        print(tr("your chapter-2 manager passed; the next cell replaces {path}, so it is kept as {copy}. "
                 "Paste its admit, grow and release into the next cell:\n", path=path, copy=copy))
    elif copy.exists():
        print(tr("your chapter-2 manager, kept earlier as {copy}. Paste its admit, grow and release into the next "
                 "cell:\n", copy=copy))
    else:
        print(tr("no chapter-2 manager to keep ({why}): the next cell's file is the whole manager, so write admit, "
                 "grow and release too, by chapter 2's contract", why=why))
        return None
    print(copy.read_text())
    return copy


# --- your manager in the engine: parallel sampling, then beam search ----------------------------------------------
@dataclass(frozen=True)
class SharingRun:
    """What one engine's memory did with ``n`` seeded samples of a prompt, and then with a beam search over it."""

    manager: str                                    # the class that made the decisions: module.name
    block_size: int
    prompt_len: int
    samples: list[list[int]]                        # each sample's tokens, by sample index
    tables: list[dict[Any, list[int]]]              # after every sampling step: each sequence's block ids
    copies: list[list[tuple[int, int]]]             # every sampling step's copy-on-write copies, (source, dest.)
    held: list[int]                                 # blocks held after every sampling step (the engine's stats)
    beam: list[int] | None                          # the top beam's tokens (None: no search was asked for)
    beam_tables: list[tuple[tuple[int, ...], ...]]  # the live beams' block tables at every decode step
    beam_copies: int                                # copy-on-write copies the beams made

    @property
    def fork_step(self) -> int:
        """The index of the sampling step after which all the samples first held memory: the prompt's prefill."""
        return next(i for i, tables in enumerate(self.tables) if len(tables) == len(self.samples))

    @property
    def shared(self) -> list[int]:
        """The blocks every sample held right after the fork."""
        first, *others = self.tables[self.fork_step].values()
        return [b for b in first if all(b in t for t in others)]

    @property
    def sampling(self) -> tuple[Any, ...]:
        """The samples, and every sampling step's tables and copies: what two managers must agree on."""
        return self.samples, self.tables, self.copies

    @property
    def search(self) -> tuple[Any, ...]:
        """The top beam, the beams' tables at every decode step and their copies (compare a
        :class:`~pagedkv_edu.engine.beam.BeamSearchOutput` with :func:`search_of`)."""
        return self.beam, self.beam_tables, self.beam_copies


def search_of(found: Any) -> tuple[Any, ...]:
    """A :class:`~pagedkv_edu.engine.beam.BeamSearchOutput` as :attr:`SharingRun.search` reads it."""
    return found.token_ids, [f.tables for f in found.frames], found.num_copies


def sample_and_search(engine: Callable[[], Any], prompt: Sequence[int], sampling: SamplingParams,
                      beams: BeamSearchParams | None = None) -> SharingRun:
    """``sampling`` (``n`` samples) on a fresh idle engine from ``engine()``, then ``beams`` (if given) on another.

    ``engine`` makes an :class:`~pagedkv_edu.engine.engine.LLMEngine`: ``parts.engine``'s (your manager, if it
    passed) or the shipped one. Records every sampling step's tables, copies and held blocks.
    """
    sampler = engine()
    sampler.add_request(list(prompt), sampling)
    tables: list[dict[Any, list[int]]] = []
    copies: list[list[tuple[int, int]]] = []
    held: list[int] = []
    samples: list[list[int]] = []
    while sampler.has_unfinished:
        for out in sampler.step():
            samples = [list(c.token_ids) for c in out.completions]
        tables.append({seq: table.block_ids for seq, table in sampler.memory.tables.items()})
        copies.append([(int(src), int(dst)) for src, dst in sampler.last_step.copies.copy])
        held.append(sampler.history[-1].kv_held_slots // sampler.memory.block_size)
    beam, beam_tables, beam_copies = (None, [], 0) if beams is None else search_of(beam_search(engine(), prompt, beams))
    memory = getattr(sampler.memory, "memory", sampler.memory)     # a reader's manager runs inside CheckedMemory
    return SharingRun(f"{type(memory).__module__}.{type(memory).__name__}", sampler.memory.block_size, len(prompt),
                      samples, tables, copies, held, beam, beam_tables, beam_copies)
