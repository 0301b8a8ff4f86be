"""Graders for chapter 2 (block pool and block tables): the slot mapping, appending one token, the block manager.

A wrong slot is explained by the block it lands in (out of range, or another sequence's); when
the wrong slots are what another block size or the power-of-two bit tricks give, it says that.
The block manager is a file (``my_engine/block_manager.py``) graded call by call against the
package's manager: the same answers, tables, free queue and reference counts after every call,
on the text's walk-throughs and then on seeded random calls (a hypothesis state machine). When it
passes it is marked passed, and the engine runs it (:mod:`~pagedkv_edu.exercises.my_engine`).
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test

from ..core.block_manager import BlockManager, ManagerBase
from ..core.block_pool import BlockPool, OutOfBlocksError
from ..core.request import Request, SamplingParams
from . import report

from .grading import Raised, Reader, as_int, as_int_list, describe_exception, grade, seeded, short, span
from .messages import Message, tr
from .my_engine import PARTS, load_file, mark_passed
from .solutions import ch2 as reference

MAX_SHOWN = 6   # diff rows printed per failing case


@dataclass(frozen=True)
class SlotCase:
    name: Message
    block_table: tuple[int, ...]
    block_size: int
    positions: tuple[int, ...]
    num_blocks: int   # size of the pool the table points into


SLOT_CASES: tuple[SlotCase, ...] = (
    SlotCase(tr("the paged-KV-cache article: 41 tokens in [7, 3, 12], block size 16"), (7, 3, 12), 16,
             tuple(range(41)), 16),
    SlotCase(tr("the block-table article: 9 tokens in [7, 1, 3], block size 4"), (7, 1, 3), 4, tuple(range(9)), 8),
    SlotCase(tr("positions out of order, block size 8"), (5, 0, 9, 2), 8, (31, 0, 8, 17, 7, 24, 16), 12),
    SlotCase(tr("block size 1"), (3, 0, 2), 1, (0, 1, 2), 4),
)

# Block sizes of the hidden cases: mostly not powers of two, where bit tricks go wrong.
HIDDEN_BLOCK_SIZES = (3, 5, 6, 12, 3, 5, 6, 12, 1, 2, 7, 10, 16)


def random_table(rng: random.Random, num_blocks: int, length: int) -> list[int]:
    """``length`` distinct block ids out of a pool of ``num_blocks``, in random order."""
    return rng.sample(range(num_blocks), length)


def edge_length(rng: random.Random, blocks: int, block_size: int) -> int:
    """A token count that needs exactly ``blocks`` blocks: full, one token into the last, or in between."""
    if blocks == 0:
        return 0
    first = (blocks - 1) * block_size + 1
    return rng.choice([blocks * block_size, first, rng.randint(first, blocks * block_size)])


def _draw_slot_case(rng: random.Random, i: int) -> SlotCase:
    b = rng.choice(HIDDEN_BLOCK_SIZES)
    length = rng.randint(0, 6)
    num_blocks = length + rng.randint(1, 24)
    table = random_table(rng, num_blocks, length)
    capacity = length * b
    shape = rng.randrange(4)
    if shape == 0:      # a whole sequence, a multiple of B tokens long
        positions = list(range(capacity))
    elif shape == 1:    # a prefix of it, ending anywhere (0 or 1 tokens included)
        positions = list(range(rng.randint(0, min(capacity, 1 + rng.randrange(2) * capacity))))
    else:               # any positions, in any order
        positions = rng.sample(range(capacity), rng.randint(0, capacity))
    return SlotCase(tr("hidden case {n}: table {table}, block size {size}, positions {positions}", n=i + 1,
                       table=table, size=b, positions=span(positions)),
                    tuple(table), b, tuple(positions), num_blocks)


HIDDEN_SLOT_CASES = seeded(150, 2, _draw_slot_case)


def where(slot: object, block_size: int, table: Sequence[int], num_blocks: int) -> Message:
    """Explain where a (wrong) slot lands."""
    value = as_int(slot)
    if value is None:
        return tr("not an integer slot: {slot}", slot=short(slot))
    block, offset = divmod(value, block_size)
    if value < 0 or block >= num_blocks:
        return tr("block id {block} is out of range for a pool of {count} blocks", block=block, count=num_blocks)
    if block not in table:
        return tr("lands in block {block} (offset {offset}), which this table {table} does not hold", block=block,
                  offset=offset, table=list(table))
    return tr("lands in block {block}, offset {offset}", block=block, offset=offset)


def _bit_trick_variants(table: Sequence[int], b: int, p: int) -> list[int]:
    """The slots that mixes of ``p >> log2(B)``, ``p & (B - 1)`` and ``<< log2(B)`` give: right only for B = 2**k."""
    out = []
    for s in {b.bit_length() - 1, (b - 1).bit_length()}:
        for block in {p // b, p >> s}:
            if not 0 <= block < len(table):
                continue
            for base in {table[block] * b, table[block] << s}:
                for offset in {p % b, p & (b - 1), p & ((1 << s) - 1)}:
                    out += [base + offset, base | offset]
    return out


def diagnose_slots(table: Sequence[int], block_size: int, positions: Sequence[int],
                   got: Sequence[int]) -> Message | None:
    """Name the cause when wrong slots are exactly another block size's, or the bit tricks'."""
    return diagnose_batch_slots([(table, positions, got)], block_size)


def diagnose_batch_slots(groups: Sequence[tuple[Sequence[int], Sequence[int], Sequence[int]]],
                         block_size: int) -> Message | None:
    """:func:`diagnose_slots` for several sequences at once, each ``(table, positions, slots)``."""
    pairs = [(table, p, g) for table, positions, got in groups for p, g in zip(positions, got)]
    if not pairs:
        return None
    if all(t[p // block_size] + p % block_size == g for t, p, g in pairs):
        return tr("these slots are block id + offset: the block id must be multiplied by the block size")
    if len(pairs) < 2:
        return None
    for other in [16, *range(1, 65)]:
        if other == block_size:
            continue
        try:
            if all(t[p // other] * other + p % other == g for t, p, g in pairs):
                return tr("these are the slots block size {other} would give, but the block size here is {size}: "
                          "use the block_size argument (not a global B)", other=other, size=block_size)
        except IndexError:
            continue
    if block_size & (block_size - 1) and all(g in _bit_trick_variants(t, block_size, p) for t, p, g in pairs):
        return tr("p >> log2(B), p & (B - 1) and << log2(B) equal p // B, p % B and * B only when B is a power "
                  "of two; the block size here is {size}", size=block_size)
    return None


def explain_slot(slot: int | None, table: Sequence[int], position: int, block_size: int) -> Message | None:
    """Name the cause of one wrong slot, given the (right) table: the bit tricks, or the usual wrong
    block size (the notebook's B = 16, the chapter examples' 4 or 8). One slot is weak evidence:
    call this only when the rest of the step (the table) is right."""
    if slot is None or not table:
        return None
    causes = []
    block = table[-1]
    other = next((c for c in (16, 4, 8) if c != block_size and block * c + position % c == slot), None)
    if other is not None and block != 0:
        causes.append(tr("the slot at block size {other}", other=other))
    if block_size & (block_size - 1) and slot in _bit_trick_variants(table, block_size, position):
        causes.append(tr("what the bit tricks p & (B - 1), p >> log2(B) give (right only when B is a power of two)"))
    if len(causes) == 2:
        return tr("{first} or {second}, but the block size here is {size}", first=causes[0], second=causes[1],
                  size=block_size)
    return tr("{cause}, but the block size here is {size}", cause=causes[0], size=block_size) if causes else None


def _index_hint(exc: Raised, block_size: int, table: Sequence[int]) -> Message | None:
    """What an IndexError in a slot computation usually means: a logical block past the table's end."""
    if not isinstance(exc.error, IndexError):
        return None
    if block_size & (block_size - 1):
        return tr("(a logical block past the end of the table {table}? the block size here is {size}, not a power of "
                  "two: >> and & stand for // and % only for powers of two)", table=list(table), size=block_size)
    return tr("(a logical block past the end of the table {table}? the block size here is {size})", table=list(table),
              size=block_size)


def _raised(exc: Raised, block_size: int, table: Sequence[int]) -> Message | str:
    """What the reader's code raised, and what an IndexError there usually means."""
    hint = _index_hint(exc, block_size, table)
    return str(exc) if hint is None else tr("{error} {hint}", error=exc, hint=hint)


def _run_slot_mapping(fn: Reader, case: SlotCase) -> list[str]:
    expected = reference.slot_mapping(case.block_table, case.block_size, case.positions)
    try:
        raw = fn(list(case.block_table), case.block_size, list(case.positions))
    except Raised as exc:
        return [_raised(exc, case.block_size, case.block_table)]
    got, problem = as_int_list(raw, tr("slot"))
    if got is None:
        return [problem]
    if len(got) != len(expected):
        return [tr("expected {expected} slots (one per position), got {got}", expected=len(expected), got=len(got))]
    wrong = [(p, e, g) for p, e, g in zip(case.positions, expected, got, strict=True) if e != g]
    if not wrong:
        return []
    cause = diagnose_slots(case.block_table, case.block_size, case.positions, got)
    lines: list[Message | str] = [cause] if cause else []
    lines.append(tr("{wrong} of {total} slots wrong", wrong=len(wrong), total=len(expected)))
    # the columns are right-aligned to 8 characters (the translation aligns its own header)
    header = tr("position expected      got") if cause else tr("position expected      got  where 'got' lands")
    lines.append(f"  {header}")
    for p, e, g in wrong[:MAX_SHOWN]:
        row = f"  {p:>8} {e:>8} {g:>8}"
        lines.append(row if cause else f"{row}  {where(g, case.block_size, case.block_table, case.num_blocks)}")
    if len(wrong) > MAX_SHOWN:
        lines.append(f"  {tr('... and {count} more', count=len(wrong) - MAX_SHOWN)}")
    return lines


def check_slot_mapping(fn: Callable[[Sequence[int], int, Sequence[int]], Sequence[int]]) -> bool:
    """Grade ``fn(block_table, block_size, positions) -> slots`` against the reference."""
    return grade("slot_mapping（槽位映射）", fn, SLOT_CASES, HIDDEN_SLOT_CASES, _run_slot_mapping)


# --- appending one token ---------------------------------------------------------------------------

@dataclass(frozen=True)
class AppendCase:
    name: Message
    block_table: tuple[int, ...]
    num_tokens: int
    block_size: int
    free_blocks: tuple[int, ...]
    appends: int
    num_blocks: int


APPEND_CASES: tuple[AppendCase, ...] = (
    AppendCase(tr("the block-table article: [7, 1] holds 7 tokens, block size 4; the 8th and 9th arrive"),
               (7, 1), 7, 4, (3, 0, 2, 4, 5, 6), 2, 8),
    AppendCase(tr("the paged-KV-cache article: an empty sequence grows to 42 tokens, block size 16"),
               (), 0, 16, (7, 3, 12, 0, 14), 42, 16),
    AppendCase(tr("block size 1: every token takes a block"), (), 0, 1, (2, 0, 1), 3, 3),
)


def _draw_append_case(rng: random.Random, i: int) -> AppendCase:
    b = rng.choice(HIDDEN_BLOCK_SIZES)
    length = rng.randint(0, 3)
    tokens = edge_length(rng, length, b)
    appends = rng.randint(1, 2 * b + 2)
    needed = -(-(tokens + appends) // b) - length
    num_blocks = length + needed + rng.randint(0, 4)
    ids = random_table(rng, num_blocks, num_blocks)
    table, free = ids[:length], ids[length:]
    return AppendCase(tr("hidden case {n}: table {table} holds {tokens} tokens, block size {size}, free list {free}; "
                         "{appends} tokens arrive", n=i + 1, table=table, tokens=tokens, size=b, free=free,
                         appends=appends), tuple(table), tokens, b, tuple(free), appends, num_blocks)


HIDDEN_APPEND_CASES = seeded(100, 3, _draw_append_case)


def growth_hint(before: Sequence[int], got: Sequence[object], expected: Sequence[int], position: int,
                block_size: int) -> list[Message]:
    """Why a table should (or should not) have grown by a block at this position: the block size decides."""
    grew, should_grow = len(got) > len(before), len(expected) > len(before)
    if should_grow and not grew:
        if not before:
            return [tr("position {position} is a multiple of the block size {size}: the table is empty, so the token "
                       "needs a new block", position=position, size=block_size)]
        return [tr("position {position} is a multiple of the block size {size}: the last block is full, so the token "
                   "needs a new block", position=position, size=block_size)]
    if grew and not should_grow:
        return [tr("position {position} is not a multiple of the block size {size}: the last block still has {free} "
                   "free slots", position=position, size=block_size, free=block_size - position % block_size)]
    return []


def _run_append_token(fn: Reader, case: AppendCase) -> list[str]:
    exp_table, exp_free = list(case.block_table), list(case.free_blocks)
    got_table, got_free = list(case.block_table), list(case.free_blocks)
    b = case.block_size
    for i in range(case.appends):
        position = case.num_tokens + i
        before = (list(got_table), list(got_free))
        exp_slot = reference.append_token(exp_table, position, b, exp_free)
        try:
            got_slot = fn(got_table, position, b, got_free)
        except Raised as exc:
            return [tr("token at position {position}, starting from table {table}, free list {free}: {error}",
                       position=position, table=before[0], free=before[1], error=_raised(exc, b, before[0]))]
        diff: list[Message] = []
        slot = as_int(got_slot)
        table = [as_int(x) for x in got_table]
        if slot != exp_slot:
            cause = explain_slot(slot, exp_table, position, b) if table == exp_table else None
            lands = cause or where(got_slot, b, got_table, case.num_blocks)
            diff.append(tr("slot: expected {expected}, got {got} ({why})", expected=exp_slot, got=short(got_slot),
                           why=lands))
        if table != exp_table:
            diff.append(tr("block table: expected {expected}, got {got}", expected=list(exp_table),
                           got=list(got_table)))
            outside = [x for x in table if x is None or not 0 <= x < case.num_blocks]
            if outside:
                diff.append(tr("block ids {ids} are out of range for a pool of {count} blocks", ids=outside,
                               count=case.num_blocks))
            never_free = [x for x in table if x not in case.block_table and x not in case.free_blocks]
            if never_free and not outside:
                diff.append(tr("block ids {ids} were never free: another request holds them", ids=never_free))
            diff += growth_hint(before[0], table, exp_table, position, b)
        if [as_int(x) for x in got_free] != exp_free:
            diff.append(tr("free list: expected {expected}, got {got}", expected=list(exp_free), got=list(got_free)))
        if diff:   # later steps start from a wrong state; the first difference is the lesson
            return [tr("token at position {position}, starting from table {table}, free list {free}:",
                       position=position, table=before[0], free=before[1])] + [f"  {line}" for line in diff]
    return []


def check_append_token(fn: Callable[[list[int], int, int, list[int]], int]) -> bool:
    """Grade ``fn(block_table, num_tokens, block_size, free_blocks) -> slot``, called once per
    new token; it must update the table and the free list in place."""
    return grade("append_token（附加一個 token）", fn, APPEND_CASES, HIDDEN_APPEND_CASES, _run_append_token)


# --- the block manager (your turn 3): a file, graded call by call against the package's -------------

MANAGER_NAME = "BlockManager（區塊管理器）"
MANAGER_FILE = PARTS["block_manager"].path()
"""Where chapter 2 saves the reader's block manager, relative to the notebooks (git ignores it)."""

MAX_OUTPUT = 4096    # the records' max_tokens: a manager never reads it, the grader never reaches it
EARLIER_SHOWN = 6    # earlier calls printed above a failing one


@dataclass(frozen=True)
class Op:
    """One call the grader makes as the scheduler would: admit a sequence's first ``tokens``, grow it, release it.

    ``prompt`` is the prompt length of a record the call creates (the first admit of ``seq``).
    """

    kind: str
    seq: str
    tokens: int = 0
    prompt: int = 0

    def text(self) -> str:
        return f"{self.kind}({self.seq!r})" if self.kind == "release" else f"{self.kind}({self.seq!r}, {self.tokens})"


def admit(seq: str, tokens: int, prompt: int = 0) -> Op:
    return Op("admit", seq, tokens, prompt)


def grow(seq: str, tokens: int) -> Op:
    return Op("grow", seq, tokens)


def release(seq: str) -> Op:
    return Op("release", seq)


@dataclass(frozen=True)
class ManagerCase:
    """A pool (``num_blocks`` of ``block_size``, free queue ``free_order``, the rest held elsewhere) and the calls."""

    name: Message
    num_blocks: int
    block_size: int
    free_order: tuple[int, ...]
    ops: tuple[Op, ...] = ()
    watermark_blocks: int = 0

    def pool(self) -> BlockPool:
        return BlockPool.from_free_order(self.num_blocks, self.block_size, list(self.free_order))

    def describe(self) -> Message:
        held = self.num_blocks - len(self.free_order)
        pool = dict(blocks=self.num_blocks, size=self.block_size, queue=short(list(self.free_order), 70))
        if held and self.watermark_blocks:
            return tr("a pool of {blocks} blocks of {size}, free queue {queue} ({held} held elsewhere), watermark "
                      "{watermark} blocks", **pool, held=held, watermark=self.watermark_blocks)
        if held:
            return tr("a pool of {blocks} blocks of {size}, free queue {queue} ({held} held elsewhere)", **pool,
                      held=held)
        if self.watermark_blocks:
            return tr("a pool of {blocks} blocks of {size}, free queue {queue}, watermark {watermark} blocks", **pool,
                      watermark=self.watermark_blocks)
        return tr("a pool of {blocks} blocks of {size}, free queue {queue}", **pool)


MANAGER_CASES: tuple[ManagerCase, ...] = (
    ManagerCase(tr("the block-table article: a 7-token prompt at block size 4, the 8th and 9th tokens, then release"),
                8, 4, (7, 1, 3, 0, 2, 4, 5, 6), (admit("a", 7, 7), grow("a", 1), grow("a", 1), release("a"))),
    ManagerCase(tr("the paged-KV-cache article: 41 tokens at block size 16, then 8 more (the 49th takes a block), "
                   "then release"), 16, 16, (7, 3, 12, 0, 14),
                (admit("a", 41, 41), grow("a", 1), grow("a", 6), grow("a", 1), release("a"))),
    ManagerCase(tr("a short pool: what does not fit is refused (None) and nothing changes; a prompt admitted in "
                   "chunks"), 5, 4, (4, 0, 3, 1, 2),
                (admit("a", 9, 9), admit("b", 12, 12), grow("a", 4), admit("b", 4), grow("a", 4), grow("b", 4),
                 release("a"), grow("b", 4), grow("b", 4), release("b"))),
    ManagerCase(tr("the watermark: an admission leaves 2 blocks free while any sequence holds memory; growing may "
                   "use them"), 6, 4, tuple(range(6)),
                (admit("a", 20, 20), admit("b", 8, 8), grow("a", 4), release("a"), admit("b", 8), admit("c", 8, 8),
                 admit("d", 1, 1), grow("b", 1), release("b"), release("c"), admit("d", 1)), watermark_blocks=2),
)

# The hidden runs: a hypothesis state machine, derandomized (the same calls in every run, a few seconds).
MANAGER_BLOCK_SIZES = (3, 5, 6, 12, 1, 16)
HIDDEN_RUNS = 120
HIDDEN_STEPS = 30


@dataclass
class MemoryState:
    """What a manager holds: each table by sequence id, the pool's free queue (front first), every reference count."""

    tables: dict[Hashable, list[int]]
    free_queue: list[int]
    ref_counts: list[int]


class BrokenState(Exception):
    """The reader's manager's state cannot be read as the base class reads it; the message says why."""


def read_state(manager: ManagerBase) -> MemoryState:
    """A copy of what ``manager`` holds, read as the base class reads it (a reader's ``held`` may not allow it)."""
    try:
        tables = {seq.seq_id: [int(b) for b in ids] for seq, ids in manager.held.items()}
    except AttributeError as exc:
        raise BrokenState(tr("self.held must map each sequence's record (the Request, not its id) to its block ids: "
                             "the base class's questions read it that way ({error})", error=str(exc))) from exc
    except (TypeError, ValueError) as exc:
        raise BrokenState(tr("self.held must map each record to a list of block ids; it holds {held}",
                             held=short(manager.held))) from exc
    return MemoryState(tables, manager.pool.free_ids(), list(manager.pool.ref_counts))


@dataclass
class Step:
    """One call made on both managers: the state before, each one's answer (yours may be what it raised) and state."""

    op: Op
    tokens_before: int
    counts_before: dict[Hashable, int]   # every record's num_computed_tokens before the call
    before: MemoryState
    expected: list[int] | None
    expected_state: MemoryState
    yours: Any = None
    your_state: MemoryState | None = None
    problems: list[str] = field(default_factory=list)


class ManagerPair:
    """The reader's manager and the package's over equal pools, driven with the same calls on the same records.

    The grader plays the scheduler: it appends output tokens before growing for them and advances
    each record's ``num_computed_tokens`` after both managers granted; a released record goes back
    to waiting with its count at 0, as a preempted one does. A manager only reads the records.
    """

    def __init__(self, cls: type, case: ManagerCase, reader_file: str | Path | None = None) -> None:
        self.case = case
        self.reader_file = None if reader_file is None else str(Path(reader_file).resolve())
        self.expected = BlockManager.over(case.pool())
        self.expected.watermark_blocks = case.watermark_blocks
        self.yours = cls(case.pool(), None, watermark_blocks=case.watermark_blocks)
        self.records: dict[str, Request] = {}
        self.steps: list[Step] = []

    def record(self, op: Op) -> Request:
        if op.seq not in self.records:
            self.records[op.seq] = Request(op.seq, None, SamplingParams(max_tokens=MAX_OUTPUT),
                                           num_prompt_tokens=op.prompt)
        return self.records[op.seq]

    def do(self, op: Op) -> Step:
        """Make ``op`` on both managers and compare: the step, with its problems (none when they agree)."""
        seq = self.record(op)
        if op.kind == "grow":          # the step's new tokens are on the record before the memory is asked
            seq.output_token_ids += [0] * max(0, seq.num_computed_tokens + op.tokens - seq.num_tokens)
        args = self.arguments(op, seq)
        counts = {s.seq_id: s.num_computed_tokens for s in self.records.values()}
        before = self.read(self.expected)
        step = Step(op, seq.num_computed_tokens, counts, before, None, before)
        step.expected = getattr(self.expected, op.kind)(*args)
        step.expected_state = self.read(self.expected)
        self.steps.append(step)
        try:
            before_yours = self.read(self.yours)
        except BrokenState as exc:      # only a constructor of the reader's can leave it so
            step.problems = [str(exc)]
            return step
        counted, outputs = (seq.num_computed_tokens, seq.num_tokens), list(seq.output_token_ids)
        try:
            step.yours = getattr(self.yours, op.kind)(*args)
        except Exception as exc:   # noqa: BLE001 (the reader's code may raise anything: a failure, named)
            step.yours = exc
        try:
            step.your_state = self.read(self.yours)
        except BrokenState as exc:
            step.problems = [str(exc)]
            return step
        if (seq.num_computed_tokens, seq.num_tokens) != counted:   # a manager reads the record, never writes it
            step.problems = [tr("your {kind} changed the record: num_computed_tokens {before} -> {after}, tokens "
                                "{tokens_before} -> {tokens_after}. A manager only reads the record; the scheduler "
                                "advances the count after a grant", kind=op.kind, before=counted[0],
                                after=seq.num_computed_tokens, tokens_before=counted[1], tokens_after=seq.num_tokens)]
            seq.num_computed_tokens, seq.output_token_ids[:] = counted[0], outputs
            return step
        step.problems = self.compare(step, before_yours)
        if not step.problems:
            self.advance(step)
        return step

    def arguments(self, op: Op, seq: Request) -> tuple[Any, ...]:
        """What the call ``op`` passes the managers (a chapter that adds calls adds their arguments)."""
        return (seq,) if op.kind == "release" else (seq, op.tokens)

    def read(self, manager: ManagerBase) -> MemoryState:
        """What the comparison reads of a manager after each call (a chapter that adds state reads it too)."""
        return read_state(manager)

    def advance(self, step: Step) -> None:
        """Play the scheduler after a call, by the package's answer: count the tokens granted; a released record
        waits again with its count at 0 (its K/V would be recomputed)."""
        seq = self.records[step.op.seq]
        if step.op.kind == "release":
            seq.num_computed_tokens = 0
        elif step.expected is not None:
            seq.num_computed_tokens += step.op.tokens

    # --- what differs, and why -----------------------------------------------------------------
    def compare(self, step: Step, before_yours: MemoryState) -> list[str]:
        op, yours = step.op, step.yours
        if isinstance(yours, NotImplementedError):
            return [tr("{kind} is not written yet (it raises NotImplementedError)", kind=op.kind)]
        if isinstance(yours, BaseException):
            return [f"{op.text()} {self.describe(yours)}"] + self.raised_hint(yours)
        answer, problem = (None, "") if yours is None else as_int_list(yours, tr("block id"))
        if answer is None and yours is not None:
            wrong = dict(call=op.text(), value=short(yours), problem=problem)
            if op.kind == "admit":
                return [tr("{call} returned {value}: {problem}; it returns its whole table (a list of block ids), "
                           "or None", **wrong)]
            if op.kind == "grow":
                return [tr("{call} returned {value}: {problem}; it returns the ids it added (a list of block ids), "
                           "or None", **wrong)]
            if op.kind == "release":
                return [tr("{call} returned {value}: {problem}; it returns the ids", **wrong)]
            return [tr("{call} returned {value}: {problem}; it returns the ids (a list of block ids), or None",
                       **wrong)]
        mine, theirs = step.your_state, step.expected_state
        assert mine is not None
        lines: list[Message | str] = []
        if answer != step.expected:
            lines.append(tr("returned: yours {yours}, expected {expected}", yours=short(yours, 70),
                            expected=step.expected))
        if mine.tables != theirs.tables:
            lines.append(tr("tables: yours {yours}, expected {expected}", yours=tables_text(mine.tables),
                            expected=tables_text(theirs.tables)))
        if mine.free_queue != theirs.free_queue:
            lines.append(tr("free queue: yours {yours}, expected {expected}", yours=short(mine.free_queue, 70),
                            expected=short(theirs.free_queue, 70)))
        refs = [str(tr("block {block}: yours {yours}, expected {expected}", block=b, yours=m, expected=t))
                for b, (m, t) in enumerate(zip(mine.ref_counts, theirs.ref_counts)) if m != t]
        if refs:     # rendered now, in the reader's language: join and clip read the text
            lines.append(tr("reference counts: {counts}", counts=clip(str(tr(", ")).join(refs), 120)))
        lines += self.more_differences(step)
        if not lines:
            return []
        hint = self.hint(step, answer, before_yours)
        return lines + ([tr("hint: {hint}", hint=hint)] if hint else [])

    def more_differences(self, step: Step) -> list[str]:
        """What else differs after a call that agreed on the answer, tables, free queue and counts (none here)."""
        return []

    def hint(self, step: Step, answer: list[int] | None, before_yours: MemoryState) -> Message | None:
        """The cause, when the difference is one of the known mistakes; else None (the diff speaks)."""
        op, size, mine = step.op, self.case.block_size, step.your_state
        assert mine is not None
        free, watermark = len(step.before.free_queue), self.case.watermark_blocks
        end = (0 if op.kind == "admit" else step.tokens_before) + op.tokens
        old = step.before.tables.get(op.seq, [])
        need = -(-end // size) - len(old)
        if op.kind == "release":
            released = step.expected or []
            if len(released) > 1 and (answer == released[::-1]
                                       or mine.free_queue == step.before.free_queue + released[::-1]):
                return tr("the blocks went back first block first. Release the last block first: in chapter 8's "
                          "prefix cache the blocks freed first are evicted first, so a sequence's end goes before "
                          "its beginning, which other sequences are likelier to share")
            if op.seq in mine.tables:
                freed = [b for b in mine.tables[op.seq] if mine.ref_counts[b] == 0]
                if freed:
                    return tr("blocks {freed} are back in the free queue but still in {seq!r}'s table: a block freed "
                              "while a table still names it is handed to the next sequence while this one can still "
                              "write it. A release removes the table too", freed=freed, seq=op.seq)
                return tr("{seq!r} still holds its table: a release gives back every block and removes the table",
                          seq=op.seq)
        if answer is None and mine != before_yours:
            return tr("it returned None but changed the memory. A refusal changes nothing: count the blocks the call "
                      "needs, compare with pool.num_free (and the watermark), and only then take blocks")
        waits = op.kind == "admit" and watermark and need <= free < need + watermark
        fits = dict(call=op.text(), need=need, size=size, end=end, free=free)
        if answer is None and step.expected is not None:
            if waits and not step.before.tables:
                return tr("nothing holds memory, so the watermark does not apply: it keeps {watermark} blocks free "
                          "for the running sequences to grow into, and there are none", watermark=watermark)
            if op.kind == "grow" and watermark and need <= free < need + watermark:
                return tr("the watermark applies to admissions only: a running sequence may grow into the blocks it "
                          "keeps free (that is what they are for)")
            if need <= 0:
                held = dict(end=end, count=len(old), seq=op.seq, size=size, need=-(-end // size))
                if len(old) == 1:
                    return tr("{end} tokens fit in the {count} block {seq!r} holds (ceil({end} / {size}) = {need}): "
                              "there is nothing to take, so nothing to refuse", **held)
                return tr("{end} tokens fit in the {count} blocks {seq!r} holds (ceil({end} / {size}) = {need}): "
                          "there is nothing to take, so nothing to refuse", **held)
            return tr("{call} needs {need} new blocks of {size} for {end} tokens, and {free} are free: it fits", **fits)
        if answer is not None and step.expected is None:
            if waits:
                return tr("the watermark: while any sequence holds memory an admission leaves {watermark} blocks "
                          "free (room for the running to grow); {need} + {watermark} > {free} free",
                          watermark=watermark, need=need, free=free)
            if need > free:
                return tr("{call} needs {need} new blocks of {size} for {end} tokens, but only {free} are free",
                          **fits)
        table = mine.tables.get(op.seq)
        if answer is not None and step.expected is not None and table is not None and len(table) != -(-end // size):
            return self.count_hint(step, end, len(table), old)
        if op.kind == "grow" and answer == table and answer != step.expected:
            return tr("grow returns only the ids the table gained (here {expected}), not the whole table",
                      expected=step.expected)
        new = [b for b in (answer or []) if b not in old] if op.kind != "release" else []
        if new and new == step.before.free_queue[len(step.before.free_queue) - len(new):]:
            return tr("these blocks came from the back of the free queue: blocks are taken from its front")
        return None

    def count_hint(self, step: Step, end: int, got: int, old: list[int]) -> Message:
        """Why a granted table has ``got`` blocks for ``end`` tokens: a rounding slip, or a grow taking one always."""
        op, size = step.op, self.case.block_size
        want = -(-end // size)
        if op.kind == "grow" and got == len(old) + 1 and want == len(old) and takes_a_block_always(type(self.yours)):
            room = len(old) * size - step.tokens_before
            return tr("grow took a block for {tokens} that fit in the last block's {room} (it takes one on every call, "
                      "whatever the tokens): a grow takes blocks only for the tokens past the table's last slot",
                      tokens=tokens_text(op.tokens), room=free_slots_text(room))
        if got == want + 1 and end % size == 0:
            return tr("{end} tokens fill exactly {want} blocks of {size}: the last block is full, not partly filled. "
                      "`tokens // block_size + 1` counts one block too many; t tokens need ceil(t / block_size)",
                      end=end, want=want, size=size)
        if got == want - 1 and end % size:
            rest = dict(end=end, size=size, want=want, count=end % size)
            if end % size == 1:
                return tr("{end} tokens need ceil({end} / {size}) = {want} blocks: the {count} token in the last, "
                          "partly filled block still needs a whole block (`tokens // block_size` rounds it away)",
                          **rest)
            return tr("{end} tokens need ceil({end} / {size}) = {want} blocks: the {count} tokens in the last, partly "
                      "filled block still need a whole block (`tokens // block_size` rounds them away)", **rest)
        return tr("{end} tokens at block size {size} need ceil({end} / {size}) = {want} blocks; the table has {got}",
                  end=end, size=size, want=want, got=got)

    def raised_hint(self, exc: BaseException) -> list[Message]:
        text, pool_says = str(exc), ("double free", "more times than it is referenced")  # en: not shown to readers
        if isinstance(exc, ValueError) and any(said in text for said in pool_says):
            return [tr("hint: {hint}", hint=tr("a block was freed twice: a release drops each of its blocks' "
                                               "references once (pool.free_all(ids), or pool.free(id) once per "
                                               "block)"))]
        if isinstance(exc, OutOfBlocksError):
            return [tr("hint: {hint}", hint=tr("it asked the pool for more blocks than are free: count first, and "
                                               "return None, taking nothing, when they do not fit"))]
        return []

    def describe(self, exc: BaseException) -> Message:
        """``raised ValueError: ..., at `line``` with the reader's own line (the pool's raise is not the cause)."""
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == self.reader_file]
        if frames and frames[-1].line:
            return tr("raised {kind}: {error}, at `{line}`", kind=type(exc).__name__, error=str(exc),
                      line=frames[-1].line.strip())
        return describe_exception(exc)

    def report(self, step: Step, where: str) -> list[str]:
        """The lines that explain a failing step: the case, the calls before, the state, the difference.

        Rendered as they are made (a subclass may edit them): :meth:`earlier_call` and :meth:`state_notes`
        are what a chapter that adds calls or state changes, rather than the lines.
        """
        earlier = [self.earlier_call(s) for s in self.steps[:-1]]
        lines = [str(tr("{case}:", case=where)), f"  {self.case.describe()}"]
        if earlier:
            cut = earlier[-EARLIER_SHOWN:]
            calls = ("..., " if len(cut) < len(earlier) else "") + "; ".join(cut)
            agreed = tr("earlier calls (both agreed): {calls}", calls=calls)
            lines.append(f"  {agreed}")
        notes = "".join(str(tr(", {item}", item=note)) for note in self.state_notes(step))
        before = tr("before: tables {tables}, free queue {queue}{notes}", notes=notes,
                    tables=tables_text(step.before.tables, step.counts_before), queue=short(step.before.free_queue, 70))
        call = tr("call: {call}{detail}", call=step.op.text(), detail=self.call_detail(step))
        lines += [f"  {before}", f"  {call}"]
        return lines + [f"    {p}" for p in step.problems]

    def earlier_call(self, step: Step) -> str:
        """One earlier call in the report, with the package's answer: ``admit('a', 7) -> [7, 1]``."""
        return f"{step.op.text()} -> {step.expected}"

    def state_notes(self, step: Step) -> list[Message]:
        """What else the report's "before" line shows of the state before the call (nothing here)."""
        return []

    def call_detail(self, step: Step) -> Message | str:
        op = step.op
        if op.kind == "admit":
            return tr(" (a sequence of {tokens} tokens, holding none)", tokens=self.records[op.seq].num_tokens)
        if op.kind == "grow":
            return tr(" ({seq!r} holds {tokens} tokens; room for {room})", seq=op.seq, tokens=step.tokens_before,
                      room=step.tokens_before + op.tokens)
        return ""


def tables_text(tables: dict[Hashable, list[int]], counts: dict[Hashable, int] | None = None) -> str:
    """``{'a': [7, 1] (8 tokens)}``: the tables by sequence id, with each one's token count when given.

    Rendered now, in the reader's language (it is clipped).
    """
    if not tables:
        return str(tr("{{}} (none)"))
    parts = [str(tr("{seq!r}: {ids} ({count} tokens)", seq=seq, ids=ids, count=counts[seq]))
             if counts and seq in counts else f"{seq!r}: {ids}" for seq, ids in tables.items()]
    return clip("{" + ", ".join(parts) + "}", 160)


def tokens_text(n: int) -> Message:
    """``1 token``, ``3 tokens``."""
    return tr("{n} token", n=n) if n == 1 else tr("{n} tokens", n=n)


def free_slots_text(n: int) -> Message:
    """``1 free slot``, ``3 free slots``."""
    return tr("{n} free slot", n=n) if n == 1 else tr("{n} free slots", n=n)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def takes_a_block_always(cls: type) -> bool:
    """Does ``cls``'s grow take a block where the last one has room (5 tokens at block size 4, grown by 1)?"""
    try:
        probe = cls(BlockPool(8, 4), None)
        seq = Request("probe", None, SamplingParams(max_tokens=MAX_OUTPUT), num_prompt_tokens=5)
        if probe.admit(seq, 5) is None:
            return False
        seq.num_computed_tokens = 5
        seq.output_token_ids.append(0)
        return bool(probe.grow(seq, 1))
    except Exception:   # noqa: BLE001 (a probe of the reader's code: any failure confirms nothing)
        return False


# --- loading the reader's file ---------------------------------------------------------------------------

class NotLoaded(Exception):
    """The reader's file gives no BlockManager to grade; the message says why. ``stub``: it is not written yet."""

    def __init__(self, message: Message, *, stub: bool = False) -> None:
        super().__init__(message)
        self.stub = stub


def load_manager_class(path: str | Path) -> type:
    """The ``BlockManager`` class of the reader's file, checked to be built on :class:`ManagerBase`."""
    path = Path(path)
    if not path.exists():
        raise NotLoaded(tr("{path} does not exist: run the %%writefile cell above", path=path), stub=True)
    try:
        module = load_file(path)
    except Exception as exc:   # noqa: BLE001 (a reader's file can raise anything on import)
        raise NotLoaded(tr("importing {path} {error}", path=path, error=describe_exception(exc))) from exc
    cls = getattr(module, "BlockManager", None)
    if not (isinstance(cls, type) and issubclass(cls, ManagerBase)):
        found = (tr("defines no BlockManager") if cls is None else
                 tr("defines a BlockManager that is not a class built on ManagerBase") if isinstance(cls, type) else
                 tr("defines BlockManager as {value}, not a class", value=short(cls)))
        raise NotLoaded(tr("{path} {found}: write `class BlockManager(ManagerBase):` (ManagerBase keeps the tables and "
                           "answers the questions; your class makes the decisions)", path=path, found=found))
    missing = [m for m in ("admit", "grow", "release") if not callable(getattr(cls, m, None))]
    if missing:
        raise NotLoaded(tr("your BlockManager has no {methods}: the scheduler calls admit, grow and release",
                           methods=str(tr(", ")).join(missing)))
    return cls


class Mismatch(Exception):
    """The first difference between the two managers; carries the report's lines (raised inside the state machine)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def build_pair(cls: type, case: ManagerCase, path: Path, where: str,
               pair: type[ManagerPair] = ManagerPair) -> ManagerPair:
    """Both managers over the case's pool (compared by ``pair``); a reader's constructor that fails is a
    :class:`Mismatch`, named."""
    try:
        return pair(cls, case, path)
    except Exception as exc:   # noqa: BLE001 (the reader's constructor)
        raise Mismatch([tr("{case}: BlockManager(pool, None, watermark_blocks={watermark}) {error} (ManagerBase's "
                           "constructor takes these: keep it)", case=where, watermark=case.watermark_blocks,
                           error=describe_exception(exc))]) from exc


def run_case(cls: type, case: ManagerCase, path: Path, where: str,
             pair: type[ManagerPair] = ManagerPair) -> list[str]:
    """The lines explaining the case's first difference, or [] when every call agrees."""
    try:
        pair = build_pair(cls, case, path, where, pair)
    except Mismatch as exc:
        return exc.lines
    for op in case.ops:
        step = pair.do(op)
        if step.problems:
            return pair.report(step, where)
    return []


def hidden_machine(cls: type, path: Path, pair: type[ManagerPair] = ManagerPair) -> type[RuleBasedStateMachine]:
    """A state machine that drives ``cls`` and the package's manager with the same random calls, compared by
    ``pair``; a chapter that adds calls subclasses it with rules of its own."""

    runs = [0]

    def edges(tokens: int, size: int, limit: int) -> st.SearchStrategy[int]:
        """Token counts from ``tokens`` that end at a block's edge (fill the last block, one past it, a block more)
        or anywhere, up to ``limit``."""
        room = -tokens % size
        near = sorted({n for n in (1, room, room + 1, room + size, size, size + 1) if 1 <= n <= limit})
        return st.one_of(st.sampled_from(near), st.integers(1, limit))

    class Machine(RuleBasedStateMachine):
        pair: ManagerPair

        @initialize(size=st.sampled_from(MANAGER_BLOCK_SIZES), num_blocks=st.integers(1, 20),
                    held_elsewhere=st.integers(0, 3), seed=st.integers(0, 2**16),
                    watermark=st.sampled_from((0, 0, 1, 2)))
        def build(self, size: int, num_blocks: int, held_elsewhere: int, seed: int, watermark: int) -> None:
            """A pool whose free queue is a seeded shuffle; up to 3 blocks held by requests outside the run."""
            runs[0] += 1
            order = random.Random(seed).sample(range(num_blocks), num_blocks)
            case = ManagerCase(tr("hidden case {n}", n=runs[0]), num_blocks, size,
                               tuple(order[:max(1, num_blocks - held_elsewhere)]), watermark_blocks=watermark)
            self.pair = build_pair(cls, case, path, case.name, pair)
            self.next_id = 0

        @property
        def capacity(self) -> int:
            return self.pair.case.num_blocks * self.pair.case.block_size

        def live(self) -> list[Request]:
            return self.pair.expected.sequences

        def waiting(self) -> list[Request]:
            return [s for s in self.pair.records.values() if s not in self.pair.expected]

        def do(self, op: Op) -> None:
            step = self.pair.do(op)
            if step.problems:
                raise Mismatch(self.pair.report(step, tr("{case} (seeded random calls), call {call}",
                                                         case=self.pair.case.name, call=len(self.pair.steps))))

        @rule(data=st.data())
        def admit_one(self, data: st.DataObject) -> None:
            """A waiting record again (released: its count back at 0), or a new one; all of it or a chunk."""
            size = self.pair.case.block_size
            waiting = [s for s in self.waiting() if s.num_tokens <= self.capacity]
            if waiting and data.draw(st.booleans()):
                seq = data.draw(st.sampled_from(waiting))
                whole = seq.num_tokens
                self.do(admit(seq.seq_id, data.draw(st.one_of(st.just(whole), edges(0, size, whole)))))
                return
            prompt = data.draw(st.one_of(edges(0, size, min(self.capacity, 2 * size)), edges(0, size, self.capacity)))
            chunk = data.draw(st.one_of(st.just(prompt), edges(0, size, prompt)))
            name = f"s{self.next_id}"
            self.next_id += 1
            self.do(admit(name, chunk, prompt))

        @precondition(lambda self: any(s.num_computed_tokens < self.capacity for s in self.live()))
        @rule(data=st.data())
        def grow_one(self, data: st.DataObject) -> None:
            seq = data.draw(st.sampled_from([s for s in self.live() if s.num_computed_tokens < self.capacity]))
            limit = self.capacity - seq.num_computed_tokens
            tokens = data.draw(st.one_of(st.just(1), edges(seq.num_computed_tokens, self.pair.case.block_size, limit)))
            self.do(grow(seq.seq_id, tokens))

        @precondition(lambda self: bool(self.live()))
        @rule(data=st.data())
        def release_one(self, data: st.DataObject) -> None:
            self.do(release(data.draw(st.sampled_from(self.live())).seq_id))

    return Machine


HIDDEN_SETTINGS = settings(max_examples=HIDDEN_RUNS, stateful_step_count=HIDDEN_STEPS, derandomize=True,
                           database=None, deadline=None, phases=(Phase.generate,), report_multiple_bugs=False,
                           suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, print_blob=False)


HIDDEN_SEED = int("618975931545351544720188214503643793122063357171923980326145364362506176622449909987744244615952"
                  "7888820870080547220")
"""The seed of chapter 2's hidden runs. A derandomized run draws from a hash of the machine's source, so a line of
it reworded (translated) would change every hidden call; this is the seed that source gave, so the hidden calls
stay the ones the chapter's hidden runs have always made."""


def _first_mismatch(exc: BaseException) -> Mismatch | None:
    if isinstance(exc, Mismatch):
        return exc
    for inner in getattr(exc, "exceptions", ()):   # hypothesis wraps a flaky failure in a group
        found = _first_mismatch(inner)
        if found is not None:
            return found
    return None


@contextmanager
def without_local_constants() -> Iterator[None]:
    """Hypothesis runs with no integers taken from the constants of the loaded modules.

    Hypothesis (6.131 and later) now and then draws a number written in a "local" module, one
    outside site-packages: the reader's file, this package when installed editable, whatever the
    notebook imported. The hidden calls would then depend on what else the process has loaded
    (and a cache of them would be written into the notebooks' folder). Without them a derandomized
    run makes the same calls in every process. Older versions have no such constants: nothing to do.
    """
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:
        yield
        return
    local = getattr(providers, "_get_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if local is None or cache is None:
        yield
        return
    providers._get_local_constants = Constants   # an empty set of constants
    cache.cache.clear()                          # allowed constants cached from other runs hold the local ones
    try:
        yield
    finally:
        providers._get_local_constants = local
        cache.cache.clear()


def run_hidden(cls: type, path: Path, machine: Callable[[type, Path], type[RuleBasedStateMachine]] = hidden_machine,
               runs: settings = HIDDEN_SETTINGS) -> list[str]:
    """The hidden runs of ``machine`` (chapter 2's, or a later chapter's) under ``runs``: the lines explaining the
    first difference, or [] when every call agreed."""
    factory = machine(cls, path)
    if machine is hidden_machine:       # chapter 2's own: its seed, not its source's (a later chapter's keeps its own)
        factory = seed(HIDDEN_SEED)(factory)
    try:
        with without_local_constants():
            run_state_machine_as_test(factory, settings=runs)
    except Exception as exc:   # noqa: BLE001 (a Mismatch, or the reader's code failing the run some other way)
        found = _first_mismatch(exc)
        if found is None:
            raise
        return found.lines
    return []


def check_block_manager(path: str | Path = MANAGER_FILE) -> bool:
    """Grade the ``BlockManager`` in ``path`` against the package's: the text's cases, then seeded random calls.

    Every call is made on both managers with the same records; after each one the answer, every
    table, the free queue and the reference counts must be the package's. When it passes, the file
    is marked passed (its hash, beside it), and :func:`~pagedkv_edu.exercises.my_engine.load_parts`
    gives the engine your manager from then on, as long as the file is unchanged.
    """
    path = Path(path)
    try:
        cls = load_manager_class(path)
    except NotLoaded as exc:
        return report(MANAGER_NAME, [], not_solved=str(exc)) if exc.stub else report(MANAGER_NAME, [str(exc)])
    if is_stub(cls):
        return report(MANAGER_NAME, [], not_solved=tr("admit is not written yet: it raises NotImplementedError"))
    failing = [(case, lines) for case in MANAGER_CASES if (lines := run_case(cls, case, path, case.name))]
    if failing:     # the names rendered now: join reads the text
        (_, lines), also = failing[0], [str(tr('"{case}"', case=case.name)) for case, _ in failing[1:]]
        return report(MANAGER_NAME, lines + ([tr("also wrong: {cases}", cases=str(tr(", ")).join(also))] if also
                                             else []))
    hidden = run_hidden(cls, path)
    if hidden:
        return report(MANAGER_NAME, hidden)
    mark_passed(path)
    report(MANAGER_NAME, [], shown=len(MANAGER_CASES), hidden=HIDDEN_RUNS)
    marked = tr("{path} is marked passed: load_parts() now gives the engine your BlockManager (until you change the "
                "file)", path=path)
    print(f"  {marked}")
    return True


def is_stub(cls: type) -> bool:
    """Is ``cls`` the notebook's stub: does its admit raise NotImplementedError on the first case's first call?"""
    case = MANAGER_CASES[0]
    try:
        manager = cls(case.pool(), None)
        manager.admit(Request("a", None, SamplingParams(max_tokens=MAX_OUTPUT), num_prompt_tokens=7), 7)
    except NotImplementedError:
        return True
    except Exception:   # noqa: BLE001 (any other failure is graded, with its message)
        return False
    return False


def try_block_manager(path: str | Path = MANAGER_FILE, case: int | str = 0) -> dict[str, Any]:
    """Run one shown case (by index or name) on your manager and the package's; nothing is graded or printed.

    Returns the case and, for each call, its inputs, your answer (or what your code raised) and the
    expected one, with both managers' tables and free queues after it. The records advance as the
    package's manager answered.
    """
    chosen = MANAGER_CASES[case] if isinstance(case, int) else \
        next(c for c in MANAGER_CASES if case in (c.name, str(c.name)))    # its English name or the one shown
    pair = ManagerPair(load_manager_class(path), chosen, path)
    calls = []
    for op in chosen.ops:
        step = pair.do(op)
        if step.problems:          # the managers differ: the records go on as the package's answered
            pair.advance(step)
        mine = step.your_state
        calls.append(dict(call=op.text(), tokens_before=step.tokens_before, yours=step.yours, expected=step.expected,
                          your_tables=None if mine is None else mine.tables, expected_tables=step.expected_state.tables,
                          your_free_queue=None if mine is None else mine.free_queue,
                          expected_free_queue=step.expected_state.free_queue))
    return dict(case=str(chosen.name), pool=str(chosen.describe()), calls=calls)   # as a dict shows them: rendered
