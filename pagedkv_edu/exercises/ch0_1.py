"""Graders for chapters 0 and 1: KV bytes per token, and first-fit placement.

Each ``check_*`` runs the reader's function on the chapter's cases and on hidden random ones
(:mod:`.grading`), chosen to catch the usual slips: forgetting the factor 2 for K and V,
counting bits, taking the *largest* or the *best-fitting* hole instead of the first, or
rounding a request up to a power of two as a buddy allocator would.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from ..specs import MODELS
from .grading import ArgsCase, Reader, as_int, grade, short
from .solutions import ch0_1 as reference


# --- chapter 0: bytes per token ---------------------------------------------------------------

KV_BYTES_CASES: tuple[ArgsCase, ...] = tuple(
    ArgsCase(s.name, (s.num_layers, s.num_kv_heads, s.head_dim, s.bytes_per_element)) for s in MODELS.values()
) + (ArgsCase("fp32, one layer, one head", (1, 1, 128, 4)), ArgsCase("fp8 GQA", (32, 8, 128, 1)))


def _hidden_kv_bytes(count: int = 200, seed: int = 0) -> list[ArgsCase]:
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        args = (rng.randint(1, 96), rng.choice((1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 40)),
                rng.choice((32, 48, 64, 80, 96, 112, 128, 160, 192, 256)), rng.choice((1, 2, 4)))
        cases.append(ArgsCase(f"hidden case {i + 1}", args))
    return cases


HIDDEN_KV_BYTES = _hidden_kv_bytes()

_KV_BYTES_SLIPS = ((0.5, "half: did you forget that both K and V are stored?"), (8, "eight times: bits, not bytes?"),
                   (2, "twice: K and V counted twice?"))


def _run_kv_bytes(fn: Reader, case: ArgsCase) -> list[str]:
    expected = reference.kv_bytes_per_token(*case.args)
    got = fn(*case.args)
    value = as_int(got)
    if value is None:
        return [f"got {short(got)}, expected a whole number of bytes ({expected:,})"]
    if value == expected:
        return []
    hint = next((f" ({why})" for ratio, why in _KV_BYTES_SLIPS if value == expected * ratio), "")
    if not hint and value * case.args[3] == expected:
        hint = " (that is elements, not bytes: multiply by bytes_per_element)"
    return [f"arguments {case.args}: got {value:,}, expected {expected:,}{hint}"]


def check_kv_bytes_per_token(fn: Callable[[int, int, int, int], int]) -> bool:
    """Grade ``fn(num_layers, num_kv_heads, head_dim, bytes_per_element)`` on the book's models and hidden shapes."""
    return grade("kv_bytes_per_token", fn, KV_BYTES_CASES, HIDDEN_KV_BYTES, _run_kv_bytes, constant_is_stub=True)


# --- chapter 1: first fit ---------------------------------------------------------------------

FIRST_FIT_CASES: tuple[tuple[str, tuple[tuple[int, int], ...], int], ...] = (
    ("one large hole", ((0, 4096),), 2048),
    ("the first hole is too small, the second fits", ((0, 1000), (3000, 2048), (6000, 4000)), 2048),
    ("first fit, not best fit: take the lowest hole that fits", ((100, 5000), (8000, 2048)), 2048),
    ("first fit, not worst fit", ((0, 2100), (4000, 9000)), 2048),
    ("holes given out of address order", ((9000, 3000), (2000, 2500)), 2048),
    ("enough free slots in total, but no hole fits", ((0, 1500), (2000, 1500), (4000, 1500)), 2048),
    ("an exact fit", ((512, 2048),), 2048),
)


def _hidden_first_fit(count: int = 200, seed: int = 1) -> list[ArgsCase]:
    """Non-overlapping holes in random order; sizes that fit one hole exactly, fit none, or are 1."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        holes, address = [], rng.randint(0, 50)
        for _ in range(rng.randint(0, 6)):
            size = rng.randint(1, 3000)
            holes.append((address, size))
            address += size + rng.randint(1, 2000)
        rng.shuffle(holes)
        sizes = [h for _, h in holes] or [5]
        size = rng.choice([rng.choice(sizes), rng.choice(sizes) + 1, max(sizes) + rng.randint(1, 99),
                           1, rng.randint(1, 3000)])
        cases.append(ArgsCase(f"hidden case {i + 1}", (tuple(holes), size)))
    return cases


HIDDEN_FIRST_FIT = _hidden_first_fit()


def _run_first_fit(fn: Reader, case: ArgsCase) -> list[str]:
    holes, size = case.args
    expected = reference.first_fit(holes, size)
    got = fn(list(holes), size)
    value = None if got is None else as_int(got)
    if got is not None and value is None:
        return [f"got {short(got)}, expected {expected!r} (a hole's start, or None when no hole fits)"]
    if value == expected and (got is None) == (expected is None):
        return []
    starts = dict(holes)
    if value is None:
        why = f"the hole at {expected} has {starts[expected]} slots, enough for {size}"
    elif value not in starts:
        why = f"{value} is not the start of any hole"
    elif starts[value] < size:
        why = f"the hole at {value} has only {starts[value]} slots"
    else:
        why = f"the hole at {value} fits, but the one at {expected} fits too and comes first in memory"
    return [f"holes {list(holes)}, size {size}: got {value!r}, expected {expected!r} ({why})"]


def check_first_fit(fn: Callable[[Sequence[tuple[int, int]], int], int | None]) -> bool:
    """Grade ``fn(holes, size)``: the start of the lowest-address hole of at least ``size`` slots, or None."""
    shown = [ArgsCase(name, (holes, size)) for name, holes, size in FIRST_FIT_CASES]
    return grade("first_fit", fn, shown, HIDDEN_FIRST_FIT, _run_first_fit, constant_is_stub=True)
