"""Graders for chapter 2's "Your turn": the slot mapping, and appending one token.

Each ``check_*`` runs the reader's function on the seeds' walk-throughs and a few cases
chosen to catch the usual bugs (forgetting ``* B``, allocating one token early, taking
the wrong free block), prints pass or fail with a diff, and returns a bool. A block-table
bug usually shows up as a slot in somebody else's block, so a wrong slot is explained: the
physical block it lands in, and whether that block is out of range or not this sequence's.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import report
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
    SlotCase("the paged-KV-cache article: 41 tokens in [7, 3, 12], block size 16", (7, 3, 12), 16, tuple(range(41)), 16),
    SlotCase("the block-table article: 9 tokens in [7, 1, 3], block size 4", (7, 1, 3), 4, tuple(range(9)), 8),
    SlotCase("positions out of order, block size 8", (5, 0, 9, 2), 8, (31, 0, 8, 17, 7, 24, 16), 12),
    SlotCase("block size 1", (3, 0, 2), 1, (0, 1, 2), 4),
)


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


def _where(slot: object, block_size: int, table: Sequence[int], num_blocks: int) -> str:
    """Explain where a (wrong) slot lands."""
    if not isinstance(slot, numbers.Integral) or isinstance(slot, bool):
        return f"not an integer slot: {slot!r}"
    block, offset = divmod(int(slot), block_size)
    if slot < 0 or block >= num_blocks:
        return f"block id {block} is out of range for a pool of {num_blocks} blocks"
    if block not in table:
        return f"lands in block {block} (offset {offset}), which this table {list(table)} does not hold"
    return f"lands in block {block}, offset {offset}"


def check_slot_mapping(fn: Callable[[Sequence[int], int, Sequence[int]], Sequence[int]]) -> bool:
    """Grade ``fn(block_table, block_size, positions) -> slots`` against the reference."""
    failures: list[str] = []
    for case in SLOT_CASES:
        expected = reference.slot_mapping(case.block_table, case.block_size, case.positions)
        try:
            got = list(fn(list(case.block_table), case.block_size, list(case.positions)))
        except Exception as exc:  # the learner's code may raise anything; report it, don't crash
            failures.append(f"{case.name}: raised {type(exc).__name__}: {exc}")
            break
        if len(got) != len(expected):
            failures.append(f"{case.name}: expected {len(expected)} slots, got {len(got)}")
            continue
        wrong = [(p, e, g) for p, e, g in zip(case.positions, expected, got, strict=True) if e != g]
        if wrong and failures:   # the first failing case is shown in full, later ones in a line
            failures.append(f"also wrong: {case.name} ({len(wrong)} of {len(expected)} slots)")
        elif wrong:
            failures.append(f"{case.name}: {len(wrong)} of {len(expected)} slots wrong")
            failures.append(f"  {'position':>8} {'expected':>8} {'got':>8}  where 'got' lands")
            for p, e, g in wrong[:MAX_SHOWN]:
                where = _where(g, case.block_size, case.block_table, case.num_blocks)
                failures.append(f"  {p:>8} {e:>8} {g!s:>8}  {where}")
            if len(wrong) > MAX_SHOWN:
                failures.append(f"  ... and {len(wrong) - MAX_SHOWN} more")
    return report("slot_mapping", failures)


def check_append_token(fn: Callable[[list[int], int, int, list[int]], int]) -> bool:
    """Grade ``fn(block_table, num_tokens, block_size, free_blocks) -> slot``, called once per
    new token; it must update the table and the free list in place."""
    failures: list[str] = []
    for case in APPEND_CASES:
        exp_table, exp_free = list(case.block_table), list(case.free_blocks)
        got_table, got_free = list(case.block_table), list(case.free_blocks)
        for i in range(case.appends):
            position = case.num_tokens + i
            before = (list(got_table), list(got_free))
            exp_slot = reference.append_token(exp_table, position, case.block_size, exp_free)
            try:
                got_slot = fn(got_table, position, case.block_size, got_free)
            except Exception as exc:  # report the learner's exception as a failure
                failures.append(f"{case.name}: token at position {position}: raised {type(exc).__name__}: {exc}")
                return report("append_token", failures)
            diff = []
            if got_slot != exp_slot:
                where = _where(got_slot, case.block_size, got_table, case.num_blocks)
                diff.append(f"slot: expected {exp_slot}, got {got_slot} ({where})")
            if got_table != exp_table:
                diff.append(f"block table: expected {exp_table}, got {got_table}")
                outside = [b for b in got_table if not isinstance(b, int) or not 0 <= b < case.num_blocks]
                if outside:
                    diff.append(f"block ids {outside} are out of range for a pool of {case.num_blocks} blocks")
                never_free = [b for b in got_table if b not in case.block_table and b not in case.free_blocks]
                if never_free and not outside:
                    diff.append(f"block ids {never_free} were never free: another request holds them")
            if got_free != exp_free:
                diff.append(f"free list: expected {exp_free}, got {got_free}")
            if diff and failures:   # the first failing case is shown in full, later ones in a line
                failures.append(f"also wrong: {case.name} (from the token at position {position})")
                break
            if diff:
                failures.append(f"{case.name}")
                failures.append(f"  token at position {position}, starting from table {before[0]}, "
                                f"free list {before[1]}:")
                failures += ["    " + line for line in diff]
                break   # later steps start from a wrong state; the first difference is the lesson
    return report("append_token", failures)

