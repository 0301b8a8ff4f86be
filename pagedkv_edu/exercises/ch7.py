"""Graders for chapter 7's "Your turn": copy-on-write, and finding the longest cached prefix.

Each ``check_*`` replays cases chosen to catch the usual bugs, prints pass or fail with a
diff, and returns a bool. For copy-on-write they are: copying a block nobody else holds,
copying a *full* shared block (it is never written again, so a new block is enough),
forgetting to drop the reference to the shared block, and writing the new token into the
shared block anyway. For the prefix lookup: hitting the whole prompt (nothing left to
compute), matching a block by its own tokens instead of its whole prefix, and jumping over
a missing block.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from . import report
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


def _ref_counts(case: CowCase) -> list[int]:
    counts = [0] * case.num_blocks
    for _, table, _ in case.tables:
        for block in table:
            counts[block] += 1
    return counts


def check_append_with_cow(fn: Callable[[list[int], int, int, list[int], list[int]],
                                       tuple[int, tuple[int, int] | None]]) -> bool:
    """Grade ``fn(block_table, num_tokens, block_size, ref_counts, free_blocks) -> (slot, copy)``.

    ``fn`` stores token number ``num_tokens`` and must update the table, the reference counts
    and the free list in place, returning the slot and the ``(source, destination)`` copy or None.
    """
    failures: list[str] = []
    for case in COW_CASES:
        exp = ({s: list(t) for s, t, _ in case.tables}, _ref_counts(case), list(case.free_blocks))
        got = ({s: list(t) for s, t, _ in case.tables}, _ref_counts(case), list(case.free_blocks))
        lengths = {s: n for s, _, n in case.tables}
        for seq in case.appends:
            before = (list(got[0][seq]), list(got[1]), list(got[2]))
            exp_slot, exp_copy = reference.append_with_cow(exp[0][seq], lengths[seq], case.block_size, exp[1], exp[2])
            try:
                got_slot, got_copy = fn(got[0][seq], lengths[seq], case.block_size, got[1], got[2])
            except Exception as exc:  # the learner's code may raise anything; report it, don't crash
                failures.append(f"{case.name}: {seq} appending token {lengths[seq]}: raised {type(exc).__name__}: {exc}")
                return report("append_with_cow", failures)
            lengths[seq] += 1
            diff = []
            if got_copy != exp_copy:
                diff.append(f"copy: expected {exp_copy}, got {got_copy}" + (
                    "  (the last block is full: it is never written again, so nothing needs copying)"
                    if exp_copy is None and before[0] and lengths[seq] - 1 == len(before[0]) * case.block_size else ""))
            if got_slot != exp_slot:
                shared = got_slot // case.block_size if isinstance(got_slot, int) else None
                note = (f"  (block {shared} is shared: the other sequences would see this token)"
                        if shared is not None and 0 <= shared < case.num_blocks and before[1][shared] > 1 else "")
                diff.append(f"slot: expected {exp_slot}, got {got_slot}{note}")
            if got[0][seq] != exp[0][seq]:
                diff.append(f"{seq}'s block table: expected {exp[0][seq]}, got {got[0][seq]}")
            if got[1] != exp[1]:
                wrong = [b for b, (e, g) in enumerate(zip(exp[1], got[1])) if e != g]
                diff.append(f"reference counts: expected {exp[1]}, got {got[1]} (blocks {wrong} differ)")
            if got[2] != exp[2]:
                diff.append(f"free list: expected {exp[2]}, got {got[2]}")
            if diff:
                failures.append(case.name)
                failures.append(f"  {seq} appends token {lengths[seq] - 1} to table {before[0]}, "
                                f"ref counts {before[1]}, free list {before[2]}:")
                failures += ["    " + line for line in diff]
                break   # later steps start from a wrong state; the first difference is the lesson
        if failures:
            break
    return report("append_with_cow", failures)


# --- the longest cached prefix -------------------------------------------------------------------
@dataclass(frozen=True)
class PrefixCase:
    name: str
    token_ids: tuple[int, ...]
    block_size: int
    cache: tuple[tuple[tuple[int, ...], int], ...]   # (prefix through the end of a full block, block id)


_SYSTEM = (11, 12, 13, 14, 15, 16, 17, 18, 19, 20)


def _cache_of(tokens: Sequence[int], block_size: int, blocks: Sequence[int]) -> tuple[tuple[tuple[int, ...], int], ...]:
    """Cache entries for the full blocks of ``tokens`` held in ``blocks``."""
    return tuple((tuple(tokens[:(i + 1) * block_size]), b) for i, b in enumerate(blocks))


PREFIX_CASES: tuple[PrefixCase, ...] = (
    PrefixCase("a cached 10-token system prompt (block size 4), a new question after it",
               _SYSTEM + (30, 31, 32), 4, _cache_of(_SYSTEM + (40, 41), 4, [6, 2, 9])),
    PrefixCase("the whole prompt is cached (two full blocks): the last token must still be computed",
               _SYSTEM[:8], 4, _cache_of(_SYSTEM[:8], 4, [6, 2])),
    PrefixCase("one token more than the cached blocks: both hit",
               _SYSTEM[:9], 4, _cache_of(_SYSTEM[:8], 4, [6, 2])),
    PrefixCase("a shared prefix shorter than one block never hits (vLLM #54607)",
               (11, 12, 13, 50, 51, 52, 53, 54), 4, _cache_of((11, 12, 13, 60, 61, 62, 63, 64), 4, [3, 5])),
    PrefixCase("block 1 was evicted: block 2 cannot be used without it",
               _SYSTEM + (30, 31, 32), 4, tuple(e for i, e in enumerate(_cache_of(_SYSTEM + (30, 31), 4, [6, 2, 9]))
                                                if i != 1)),
    PrefixCase("the same 4 tokens after another beginning are other K/V: a block is found by its whole prefix",
               (11, 12, 13, 14, 9, 9, 9, 9, 0), 4,
               _cache_of(_SYSTEM[:8], 4, [6, 2]) + _cache_of((7, 7, 7, 7, 9, 9, 9, 9), 4, [1, 3])),
    PrefixCase("block size 1", (5, 6, 7), 1, _cache_of((5, 6, 7), 1, [4, 0, 1])),
)


def check_cached_prefix_blocks(fn: Callable[[list[int], int, Mapping[tuple[int, ...], int]], Sequence[int]]) -> bool:
    """Grade ``fn(token_ids, block_size, cache) -> block ids`` on the cases above."""
    failures: list[str] = []
    for case in PREFIX_CASES:
        cache = dict(case.cache)
        expected = reference.cached_prefix_blocks(case.token_ids, case.block_size, cache)
        try:
            got = list(fn(list(case.token_ids), case.block_size, dict(cache)))
        except Exception as exc:  # report the learner's exception as a failure
            failures.append(f"{case.name}: raised {type(exc).__name__}: {exc}")
            break
        if got != expected:
            hit = len(got) * case.block_size
            why = ""
            if hit >= len(case.token_ids):
                why = f"  ({hit} of {len(case.token_ids)} tokens hit: nothing is left to compute the logits from)"
            elif len(got) > len(expected):
                why = ("  (a block is usable only if every block before it is cached too: its K/V depend on "
                       "the whole prefix)")
            failures.append(f"{case.name}: expected blocks {expected}, got {got}{why}")
    return report("cached_prefix_blocks", failures)
