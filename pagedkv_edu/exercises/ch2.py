"""Graders for chapter 2 (block pool and block tables): the slot mapping, and appending one token.

A wrong slot is explained by the block it lands in (out of range, or another sequence's); when
the wrong slots are what another block size or the power-of-two bit tricks give, it says that.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .grading import Raised, Reader, as_int, as_int_list, grade, seeded, short, span
from .solutions import ch2 as reference

MAX_SHOWN = 6   # diff rows printed per failing case


@dataclass(frozen=True)
class SlotCase:
    name: str
    block_table: tuple[int, ...]
    block_size: int
    positions: tuple[int, ...]
    num_blocks: int   # size of the pool the table points into


SLOT_CASES: tuple[SlotCase, ...] = (
    SlotCase("the paged-KV-cache article: 41 tokens in [7, 3, 12], block size 16", (7, 3, 12), 16,
             tuple(range(41)), 16),
    SlotCase("the block-table article: 9 tokens in [7, 1, 3], block size 4", (7, 1, 3), 4, tuple(range(9)), 8),
    SlotCase("positions out of order, block size 8", (5, 0, 9, 2), 8, (31, 0, 8, 17, 7, 24, 16), 12),
    SlotCase("block size 1", (3, 0, 2), 1, (0, 1, 2), 4),
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
    return SlotCase(f"hidden case {i + 1}: table {table}, block size {b}, positions {span(positions)}",
                    tuple(table), b, tuple(positions), num_blocks)


HIDDEN_SLOT_CASES = seeded(150, 2, _draw_slot_case)


def where(slot: object, block_size: int, table: Sequence[int], num_blocks: int) -> str:
    """Explain where a (wrong) slot lands."""
    value = as_int(slot)
    if value is None:
        return f"not an integer slot: {short(slot)}"
    block, offset = divmod(value, block_size)
    if value < 0 or block >= num_blocks:
        return f"block id {block} is out of range for a pool of {num_blocks} blocks"
    if block not in table:
        return f"lands in block {block} (offset {offset}), which this table {list(table)} does not hold"
    return f"lands in block {block}, offset {offset}"


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


def diagnose_slots(table: Sequence[int], block_size: int, positions: Sequence[int], got: Sequence[int]) -> str | None:
    """Name the cause when wrong slots are exactly another block size's, or the bit tricks'."""
    return diagnose_batch_slots([(table, positions, got)], block_size)


def diagnose_batch_slots(groups: Sequence[tuple[Sequence[int], Sequence[int], Sequence[int]]],
                         block_size: int) -> str | None:
    """:func:`diagnose_slots` for several sequences at once, each ``(table, positions, slots)``."""
    pairs = [(table, p, g) for table, positions, got in groups for p, g in zip(positions, got)]
    if not pairs:
        return None
    if all(t[p // block_size] + p % block_size == g for t, p, g in pairs):
        return "these slots are block id + offset: the block id must be multiplied by the block size"
    if len(pairs) < 2:
        return None
    for other in [16, *range(1, 65)]:
        if other == block_size:
            continue
        try:
            if all(t[p // other] * other + p % other == g for t, p, g in pairs):
                return (f"these are the slots block size {other} would give, but the block size here is "
                        f"{block_size}: use the block_size argument (not a global B)")
        except IndexError:
            continue
    if block_size & (block_size - 1) and all(g in _bit_trick_variants(t, block_size, p) for t, p, g in pairs):
        return (f"p >> log2(B), p & (B - 1) and << log2(B) equal p // B, p % B and * B only when B is a power "
                f"of two; the block size here is {block_size}")
    return None


def explain_slot(slot: int | None, table: Sequence[int], position: int, block_size: int) -> str | None:
    """Name the cause of one wrong slot, given the (right) table: the bit tricks, or the usual wrong
    block size (the notebook's B = 16, the chapter examples' 4 or 8). One slot is weak evidence:
    call this only when the rest of the step (the table) is right."""
    if slot is None or not table:
        return None
    causes = []
    block = table[-1]
    other = next((c for c in (16, 4, 8) if c != block_size and block * c + position % c == slot), None)
    if other is not None and block != 0:
        causes.append(f"the slot at block size {other}")
    if block_size & (block_size - 1) and slot in _bit_trick_variants(table, block_size, position):
        causes.append("what the bit tricks p & (B - 1), p >> log2(B) give (right only when B is a power of two)")
    return " or ".join(causes) + f", but the block size here is {block_size}" if causes else None


def _index_hint(exc: Raised, block_size: int, table: Sequence[int]) -> str:
    """What an IndexError in a slot computation usually means: a logical block past the table's end."""
    if not isinstance(exc.error, IndexError):
        return ""
    bits = (", not a power of two: >> and & stand for // and % only for powers of two"
            if block_size & (block_size - 1) else "")
    return f" (a logical block past the end of the table {list(table)}? the block size here is {block_size}{bits})"


def _run_slot_mapping(fn: Reader, case: SlotCase) -> list[str]:
    expected = reference.slot_mapping(case.block_table, case.block_size, case.positions)
    try:
        raw = fn(list(case.block_table), case.block_size, list(case.positions))
    except Raised as exc:
        return [str(exc) + _index_hint(exc, case.block_size, case.block_table)]
    got, problem = as_int_list(raw, "slot")
    if got is None:
        return [problem]
    if len(got) != len(expected):
        return [f"expected {len(expected)} slots (one per position), got {len(got)}"]
    wrong = [(p, e, g) for p, e, g in zip(case.positions, expected, got, strict=True) if e != g]
    if not wrong:
        return []
    cause = diagnose_slots(case.block_table, case.block_size, case.positions, got)
    lines = [cause] if cause else []
    lines.append(f"{len(wrong)} of {len(expected)} slots wrong")
    lines.append(f"  {'position':>8} {'expected':>8} {'got':>8}" + ("" if cause else "  where 'got' lands"))
    for p, e, g in wrong[:MAX_SHOWN]:
        lands = "" if cause else "  " + where(g, case.block_size, case.block_table, case.num_blocks)
        lines.append(f"  {p:>8} {e:>8} {g:>8}{lands}")
    if len(wrong) > MAX_SHOWN:
        lines.append(f"  ... and {len(wrong) - MAX_SHOWN} more")
    return lines


def check_slot_mapping(fn: Callable[[Sequence[int], int, Sequence[int]], Sequence[int]]) -> bool:
    """Grade ``fn(block_table, block_size, positions) -> slots`` against the reference."""
    return grade("slot_mapping（槽位映射）", fn, SLOT_CASES, HIDDEN_SLOT_CASES, _run_slot_mapping)


# --- appending one token ---------------------------------------------------------------------------

@dataclass(frozen=True)
class AppendCase:
    name: str
    block_table: tuple[int, ...]
    num_tokens: int
    block_size: int
    free_blocks: tuple[int, ...]
    appends: int
    num_blocks: int


APPEND_CASES: tuple[AppendCase, ...] = (
    AppendCase("the block-table article: [7, 1] holds 7 tokens, block size 4; the 8th and 9th arrive",
               (7, 1), 7, 4, (3, 0, 2, 4, 5, 6), 2, 8),
    AppendCase("the paged-KV-cache article: an empty sequence grows to 42 tokens, block size 16",
               (), 0, 16, (7, 3, 12, 0, 14), 42, 16),
    AppendCase("block size 1: every token takes a block", (), 0, 1, (2, 0, 1), 3, 3),
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
    return AppendCase(f"hidden case {i + 1}: table {table} holds {tokens} tokens, block size {b}, "
                      f"free list {free}; {appends} tokens arrive", tuple(table), tokens, b, tuple(free),
                      appends, num_blocks)


HIDDEN_APPEND_CASES = seeded(100, 3, _draw_append_case)


def growth_hint(before: Sequence[int], got: Sequence[object], expected: Sequence[int], position: int,
                block_size: int) -> list[str]:
    """Why a table should (or should not) have grown by a block at this position: the block size decides."""
    grew, should_grow = len(got) > len(before), len(expected) > len(before)
    if should_grow and not grew:
        return [f"position {position} is a multiple of the block size {block_size}: "
                + ("the table is empty" if not before else "the last block is full")
                + ", so the token needs a new block"]
    if grew and not should_grow:
        return [f"position {position} is not a multiple of the block size {block_size}: the last block still "
                f"has {block_size - position % block_size} free slots"]
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
            return [f"token at position {position}, starting from table {before[0]}, free list {before[1]}: "
                    f"{exc}{_index_hint(exc, b, before[0])}"]
        diff = []
        slot = as_int(got_slot)
        table = [as_int(x) for x in got_table]
        if slot != exp_slot:
            cause = explain_slot(slot, exp_table, position, b) if table == exp_table else None
            lands = cause or where(got_slot, b, got_table, case.num_blocks)
            diff.append(f"slot: expected {exp_slot}, got {short(got_slot)} ({lands})")
        if table != exp_table:
            diff.append(f"block table: expected {exp_table}, got {got_table}")
            outside = [x for x in table if x is None or not 0 <= x < case.num_blocks]
            if outside:
                diff.append(f"block ids {outside} are out of range for a pool of {case.num_blocks} blocks")
            never_free = [x for x in table if x not in case.block_table and x not in case.free_blocks]
            if never_free and not outside:
                diff.append(f"block ids {never_free} were never free: another request holds them")
            diff += growth_hint(before[0], table, exp_table, position, b)
        if [as_int(x) for x in got_free] != exp_free:
            diff.append(f"free list: expected {exp_free}, got {got_free}")
        if diff:   # later steps start from a wrong state; the first difference is the lesson
            return [f"token at position {position}, starting from table {before[0]}, free list {before[1]}:"] + \
                ["  " + line for line in diff]
    return []


def check_append_token(fn: Callable[[list[int], int, int, list[int]], int]) -> bool:
    """Grade ``fn(block_table, num_tokens, block_size, free_blocks) -> slot``, called once per
    new token; it must update the table and the free list in place."""
    return grade("append_token（附加一個 token）", fn, APPEND_CASES, HIDDEN_APPEND_CASES, _run_append_token)
