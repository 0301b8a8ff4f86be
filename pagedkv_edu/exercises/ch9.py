"""Grader for chapter 9 (block size): last-block waste at a given block size.

Catches ``n % B`` (filled, not empty, slots), ``B - n % B`` (a whole block at an exact fit),
rounding down, and ``-n & (B - 1)``, right only for powers of two.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .ch2 import HIDDEN_BLOCK_SIZES
from .grading import ArgsCase, Reader, as_int, grade, seeded, short
from .messages import Message, tr
from .solutions import ch9 as reference

WASTE_CASES: tuple[tuple[str, int, int], ...] = (
    (tr("the paged-KV-cache article's 825-token request, B = 16"), 825, 16),
    (tr("a full last block wastes nothing"), 832, 16),
    (tr("one token"), 1, 16),
    (tr("block size 1 never wastes"), 825, 1),
    ("B = 256", 825, 256),
    (tr("an empty sequence holds no block"), 0, 16),
)


def _draw_waste(rng: random.Random, i: int) -> ArgsCase:
    b = rng.choice(HIDDEN_BLOCK_SIZES + (24, 100, 256))
    k = rng.randint(1, 60)
    return ArgsCase(tr("hidden case {n}", n=i + 1),
                    (rng.choice([0, 1, k * b, k * b + 1, k * b - 1, rng.randint(0, 5000)]), b))


HIDDEN_WASTE_CASES = seeded(300, 8, _draw_waste)


def _run_waste(fn: Reader, case: ArgsCase) -> list[str]:
    n, b = case.args
    expected = reference.last_block_waste(n, b)
    got = fn(n, b)
    value = as_int(got)
    if value is None:
        return [tr("(n={n}, B={b}): got {got}, expected {expected}: a number of slots is a whole number", n=n, b=b,
                   got=short(got), expected=expected)]
    if value == expected:
        return []
    hint: Message | None = None
    if value == n % b and n % b:
        hint = tr("that is the filled slots of the last block, not the empty ones")
    elif value == b - n % b and n % b == 0:
        hint = tr("the last block is exactly full: nothing is wasted")
    elif value < 0:
        hint = tr("negative: rounded the number of blocks down instead of up?")
    elif b & (b - 1) and value == -n & (b - 1):
        hint = tr("-n & (B - 1) is the waste only when B is a power of two; here B = {b}", b=b)
    if hint is None:
        return [tr("(n={n}, B={b}): got {got}, expected {expected}", n=n, b=b, got=value, expected=expected)]
    return [tr("(n={n}, B={b}): got {got}, expected {expected} ({hint})", n=n, b=b, got=value, expected=expected,
               hint=hint)]


def check_last_block_waste(fn: Callable[[int, int], int]) -> bool:
    """Grade ``fn(num_tokens, block_size)``: allocated but empty slots of the last block."""
    shown = [ArgsCase(name, (n, b)) for name, n, b in WASTE_CASES]
    return grade("last_block_waste（最後一個區塊的浪費）", fn, shown, HIDDEN_WASTE_CASES, _run_waste,
                 constant_is_stub=True)
