"""Grader for chapter 0 (why a KV cache): KV bytes per token.

Hidden random shapes catch the factor 2 for K and V forgotten, bits for bytes, elements for bytes.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ..specs import MODELS
from .grading import ArgsCase, Reader, as_int, grade, seeded, short
from .solutions import ch0 as reference

KV_BYTES_CASES: tuple[ArgsCase, ...] = tuple(
    ArgsCase(s.name, (s.num_layers, s.num_kv_heads, s.head_dim, s.bytes_per_element)) for s in MODELS.values()
) + (ArgsCase("fp32, one layer, one head", (1, 1, 128, 4)), ArgsCase("fp8 GQA", (32, 8, 128, 1)))


def _draw_kv_bytes(rng: random.Random, i: int) -> ArgsCase:
    return ArgsCase(f"hidden case {i + 1}", (rng.randint(1, 96), rng.choice((1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 40)),
                                             rng.choice((32, 48, 64, 80, 96, 112, 128, 160, 192, 256)),
                                             rng.choice((1, 2, 4))))


HIDDEN_KV_BYTES = seeded(200, 0, _draw_kv_bytes)

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
    return grade("kv_bytes_per_token（每個 token 的 KV 位元組）", fn, KV_BYTES_CASES, HIDDEN_KV_BYTES, _run_kv_bytes,
                 constant_is_stub=True)
