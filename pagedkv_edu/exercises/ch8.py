"""Grader for chapter 9 (block size): last-block waste at a given block size.

Catches ``n % B`` (the *filled* slots of the last block, not the empty ones), ``B - n % B``
(which wastes a whole block when the last block is exactly full) and rounding down.
"""

from __future__ import annotations

from collections.abc import Callable

from . import report
from .solutions import ch8 as reference

WASTE_CASES: tuple[tuple[str, int, int], ...] = (
    ("the paged-KV-cache article's 825-token request, B = 16", 825, 16),
    ("a full last block wastes nothing", 832, 16),
    ("one token", 1, 16),
    ("block size 1 never wastes", 825, 1),
    ("B = 256", 825, 256),
    ("an empty sequence holds no block", 0, 16),
)


def check_last_block_waste(fn: Callable[[int, int], int]) -> bool:
    """Grade ``fn(num_tokens, block_size)``."""
    failures = []
    for name, n, b in WASTE_CASES:
        expected = reference.last_block_waste(n, b)
        try:
            got = fn(n, b)
        except Exception as exc:  # the reader's code may raise anything
            failures.append(f"{name}: raised {type(exc).__name__}: {exc}")
            continue
        if got != expected:
            failures.append(f"{name} (n={n}, B={b}): got {got!r}, expected {expected}")
    return report("last_block_waste", failures)
