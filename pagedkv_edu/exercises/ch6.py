"""Grader for chapter 6: the scheduler's admission test.

Catches the usual slips: rounding the blocks down instead of up, forgetting the watermark,
applying the watermark when nothing runs (a prompt that needs the whole pool would then
wait forever), a watermark rule that is right only for several running requests, and an
off-by-one at the exact fit. Hidden random cases (:mod:`.grading`) use block sizes that are
not powers of two, one running request with a watermark above 0, and exact fits.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .ch2 import HIDDEN_BLOCK_SIZES
from .grading import ArgsCase, Reader, as_bool, grade, short
from .solutions import ch6 as reference

# (name, num_tokens, block_size, num_free_blocks, watermark_blocks, num_running)
ADMIT_CASES: tuple[tuple[str, int, int, int, int, int], ...] = (
    ("fits with room to spare", 40, 16, 10, 1, 3),
    ("41 tokens need 3 blocks, not 2", 41, 16, 2, 0, 1),
    ("an exact fit without watermark", 48, 16, 3, 0, 2),
    ("an exact fit, but the watermark must stay free", 48, 16, 3, 1, 2),
    ("the whole pool, nothing running: the watermark does not apply", 64, 16, 4, 1, 0),
    ("one block short", 65, 16, 4, 0, 0),
    ("block size 1", 7, 1, 8, 1, 5),
)


def _hidden_admit_cases(count: int = 300, seed: int = 7) -> list[ArgsCase]:
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        b = rng.choice(HIDDEN_BLOCK_SIZES)
        tokens = rng.choice([1, b, 2 * b, 3 * b + 1, rng.randint(1, 20 * b)])
        watermark = rng.choice([0, 1, 1, 2, 3])
        running = rng.choice([0, 1, 1, 1, 2, rng.randint(3, 9)])
        need = -(-tokens // b)
        free = max(0, need + rng.choice([0, watermark, watermark - 1, watermark + 1, -1, rng.randint(-3, 6)]))
        cases.append(ArgsCase(f"hidden case {i + 1}", (tokens, b, free, watermark, running)))
    return cases


HIDDEN_ADMIT_CASES = _hidden_admit_cases()


def _run_admit(fn: Reader, case: ArgsCase) -> list[str]:
    expected = reference.can_admit(*case.args)
    got = fn(*case.args)
    value = as_bool(got)
    tokens, b, free, watermark, running = case.args
    inputs = f"tokens={tokens}, B={b}, free={free}, watermark={watermark}, running={running}"
    if value is None:
        return [f"({inputs}): got {short(got)}, expected {expected}: the answer is True or False"]
    if value == expected:
        return []
    need = -(-tokens // b)
    return [f"({inputs}): got {value}, expected {expected} ({tokens} tokens at block size {b} take {need} "
            f"block{'s' if need != 1 else ''}; {running} request{'s' if running != 1 else ''} running)"]


def check_can_admit(fn: Callable[[int, int, int, int, int], bool]) -> bool:
    """Grade ``fn(num_tokens, block_size, num_free_blocks, watermark_blocks, num_running)``."""
    shown = [ArgsCase(name, tuple(args)) for name, *args in ADMIT_CASES]
    return grade("can_admit", fn, shown, HIDDEN_ADMIT_CASES, _run_admit, constant_is_stub=True)
