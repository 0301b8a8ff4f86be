"""Graders for chapters 0 and 1: KV bytes per token, and first-fit placement.

Each ``check_*`` runs the reader's function on cases chosen to catch the usual slips
(forgetting the factor 2 for K and V, using query heads instead of KV heads, taking the
*largest* or the *best-fitting* hole instead of the first), prints pass or fail with a
diff, and returns a bool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from . import report
from ..specs import MODELS
from .solutions import ch0_1 as reference


def check_kv_bytes_per_token(fn: Callable[[int, int, int, int], int]) -> bool:
    """Grade ``fn(num_layers, num_kv_heads, head_dim, bytes_per_element)`` on the book's models."""
    failures = []
    cases = [(s.name, s.num_layers, s.num_kv_heads, s.head_dim, s.bytes_per_element) for s in MODELS.values()]
    cases += [("fp32, one layer, one head", 1, 1, 128, 4), ("fp8 GQA", 32, 8, 128, 1)]
    for name, *args in cases:
        expected = reference.kv_bytes_per_token(*args)
        try:
            got = fn(*args)
        except Exception as exc:  # the reader's code may raise anything
            failures.append(f"{name}: raised {type(exc).__name__}: {exc}")
            continue
        if got != expected:
            hint = ""
            if got == expected // 2:
                hint = " (half: did you forget that both K and V are stored?)"
            failures.append(f"{name} {tuple(args)}: got {got!r}, expected {expected:,}{hint}")
    return report("kv_bytes_per_token", failures)


FIRST_FIT_CASES: tuple[tuple[str, tuple[tuple[int, int], ...], int], ...] = (
    ("one large hole", ((0, 4096),), 2048),
    ("the first hole is too small, the second fits", ((0, 1000), (3000, 2048), (6000, 4000)), 2048),
    ("first fit, not best fit: take the lowest hole that fits", ((100, 5000), (8000, 2048)), 2048),
    ("first fit, not worst fit", ((0, 2100), (4000, 9000)), 2048),
    ("holes given out of address order", ((9000, 3000), (2000, 2500)), 2048),
    ("enough free slots in total, but no hole fits", ((0, 1500), (2000, 1500), (4000, 1500)), 2048),
    ("an exact fit", ((512, 2048),), 2048),
)


def check_first_fit(fn: Callable[[Sequence[tuple[int, int]], int], int | None]) -> bool:
    """Grade ``fn(holes, size)``: the start of the first hole that fits, or None."""
    failures = []
    for name, holes, size in FIRST_FIT_CASES:
        expected = reference.first_fit(holes, size)
        try:
            got = fn(list(holes), size)
        except Exception as exc:
            failures.append(f"{name}: raised {type(exc).__name__}: {exc}")
            continue
        if got != expected:
            failures.append(f"{name}: holes {list(holes)}, size {size}: got {got!r}, expected {expected!r}")
    return report("first_fit", failures)
