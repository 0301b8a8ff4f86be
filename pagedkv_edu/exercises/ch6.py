"""Grader for chapter 6: the scheduler's admission test.

Catches the usual slips: rounding the blocks down instead of up, forgetting the watermark,
applying the watermark when nothing runs (a prompt that needs the whole pool would then
wait forever), and an off-by-one at the exact fit.
"""

from __future__ import annotations

from collections.abc import Callable

from . import report
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


def check_can_admit(fn: Callable[[int, int, int, int, int], bool]) -> bool:
    """Grade ``fn(num_tokens, block_size, num_free_blocks, watermark_blocks, num_running)``."""
    failures = []
    for name, *args in ADMIT_CASES:
        expected = reference.can_admit(*args)
        try:
            got = fn(*args)
        except Exception as exc:  # the reader's code may raise anything
            failures.append(f"{name}: raised {type(exc).__name__}: {exc}")
            continue
        if got is not expected:
            failures.append(f"{name} (tokens={args[0]}, B={args[1]}, free={args[2]}, watermark={args[3]}, "
                            f"running={args[4]}): got {got!r}, expected {expected}")
    return report("can_admit", failures)
