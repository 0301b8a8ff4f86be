"""Grader for chapter 1 (the contiguous cache): first-fit placement in an arena.

It catches the largest or best-fitting hole taken instead of the first, trusting the order the
holes are listed in, and rounding up to a power of two as a buddy allocator would.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from .grading import ArgsCase, Reader, as_int, grade, seeded, short
from .messages import Message, tr
from .solutions import ch1 as reference


FIRST_FIT_CASES: tuple[tuple[Message, tuple[tuple[int, int], ...], int], ...] = (
    (tr("one large hole"), ((0, 4096),), 2048),
    (tr("the first hole is too small, the second fits"), ((0, 1000), (3000, 2048), (6000, 4000)), 2048),
    (tr("first fit, not best fit: take the lowest hole that fits"), ((100, 5000), (8000, 2048)), 2048),
    (tr("first fit, not worst fit"), ((0, 2100), (4000, 9000)), 2048),
    (tr("holes given out of address order"), ((9000, 3000), (2000, 2500)), 2048),
    (tr("enough free slots in total, but no hole fits"), ((0, 1500), (2000, 1500), (4000, 1500)), 2048),
    (tr("an exact fit"), ((512, 2048),), 2048),
)


def _draw_first_fit(rng: random.Random, i: int) -> ArgsCase:
    """Non-overlapping holes in random order; sizes that fit one hole exactly, fit none, or are 1."""
    holes, address = [], rng.randint(0, 50)
    for _ in range(rng.randint(0, 6)):
        size = rng.randint(1, 3000)
        holes.append((address, size))
        address += size + rng.randint(1, 2000)
    rng.shuffle(holes)
    sizes = [h for _, h in holes] or [5]
    size = rng.choice([rng.choice(sizes), rng.choice(sizes) + 1, max(sizes) + rng.randint(1, 99),
                       1, rng.randint(1, 3000)])
    return ArgsCase(tr("hidden case {n}", n=i + 1), (tuple(holes), size))


HIDDEN_FIRST_FIT = seeded(200, 1, _draw_first_fit)


def _run_first_fit(fn: Reader, case: ArgsCase) -> list[str]:
    holes, size = case.args
    expected = reference.first_fit(holes, size)
    got = fn(list(holes), size)
    value = None if got is None else as_int(got)
    if got is not None and value is None:
        return [tr("got {got}, expected {expected!r} (a hole's start, or None when no hole fits)", got=short(got),
                   expected=expected)]
    if value == expected and (got is None) == (expected is None):
        return []
    starts = dict(holes)
    if value is None:
        why = tr("the hole at {start} has {slots} slots, enough for {size}", start=expected, slots=starts[expected],
                 size=size)
    elif value not in starts:
        why = tr("{value} is not the start of any hole", value=value)
    elif starts[value] < size:
        why = tr("the hole at {start} has only {slots} slots", start=value, slots=starts[value])
    else:
        why = tr("the hole at {start} fits, but the one at {first} fits too and comes first in memory", start=value,
                 first=expected)
    return [tr("holes {holes}, size {size}: got {got!r}, expected {expected!r} ({why})", holes=list(holes), size=size,
               got=value, expected=expected, why=why)]


def check_first_fit(fn: Callable[[Sequence[tuple[int, int]], int], int | None]) -> bool:
    """Grade ``fn(holes, size)``: the start of the lowest-address hole of at least ``size`` slots, or None."""
    shown = [ArgsCase(name, (holes, size)) for name, holes, size in FIRST_FIT_CASES]
    return grade("first_fit（首次適配）", fn, shown, HIDDEN_FIRST_FIT, _run_first_fit, constant_is_stub=True)
