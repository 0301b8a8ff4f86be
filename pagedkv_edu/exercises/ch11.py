"""Grader for chapter 11 (prefix-aware routing): the hybrid decision of SGLang's cache-aware router.

Hidden cases are decisions recorded while routing :mod:`pagedkv_edu.sim.routing_workloads` and seeded
loads and matches at each threshold's edge; where replicas tie, any of them is right.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from ..sim.routing import HybridThresholds, route
from ..sim.routing_workloads import WORKLOADS
from .grading import ArgsCase, Reader, as_int, grade, seeded, short
from .messages import Message, tr
from .solutions import ch11 as reference

CONCEPT = tr("混合路由（hybrid routing）")

SGLANG_LIKE = (0.3, 8, 1.5)   # cache_threshold, abs_threshold, rel_threshold (SGLang: 0.3, 64, 1.5)

HYBRID_CASES: tuple[tuple[str, list[int], list[int], int, float, int, float], ...] = (
    (tr("balanced, a long match wins"), [3, 4, 3, 5], [0, 512, 16, 0], 640, *SGLANG_LIKE),
    (tr("balanced, a weak match: the least loaded"), [3, 2, 4, 5], [96, 0, 0, 0], 640, *SGLANG_LIKE),
    (tr("imbalanced by both thresholds: the least loaded, despite the match"), [20, 3, 5, 6], [600, 0, 0, 0], 640,
     *SGLANG_LIKE),
    (tr("over the absolute threshold only: still balanced"), [30, 21, 25, 24], [0, 0, 600, 0], 640, *SGLANG_LIKE),
    (tr("over the relative threshold only: still balanced"), [6, 1, 2, 3], [0, 0, 0, 500], 640, *SGLANG_LIKE),
    (tr("max - min exactly the absolute threshold: balanced"), [12, 4, 5, 6], [0, 0, 400, 0], 640, *SGLANG_LIKE),
    (tr("max exactly rel_threshold x min: balanced"), [30, 20, 25, 22], [0, 0, 0, 500], 640, *SGLANG_LIKE),
    (tr("match ratio exactly the cache threshold (0.5): too weak"), [2, 1, 3, 2], [0, 0, 320, 0], 640, 0.5, 8, 1.5),
    (tr("idle and nothing cached: any replica"), [0, 0, 0], [0, 0, 0], 100, *SGLANG_LIKE),
    (tr("one replica"), [7], [0], 50, *SGLANG_LIKE),
)


def acceptable(loads: list[int], matches: list[int], prompt_len: int, cache_threshold: float, abs_threshold: int,
               rel_threshold: float) -> set[int]:
    """Every right answer: the reference's choice and any replica tied with it on what decided it."""
    low, high, best = min(loads), max(loads), max(matches)
    least = {i for i, load in enumerate(loads) if load == low}
    if high - low > abs_threshold and high > rel_threshold * low:
        return least
    if best / prompt_len > cache_threshold:
        return {i for i, m in enumerate(matches) if m == best}
    return least


@lru_cache(maxsize=1)
def trace_cases() -> tuple[ArgsCase, ...]:
    """Decisions recorded while the reference hybrid routed each workload (loads and matches as it saw them)."""
    cases = []
    for name, workload in sorted(WORKLOADS.items()):
        for replicas, thresholds in ((3, HybridThresholds()), (5, HybridThresholds(0.25, 2, 1.25))):
            run = route(workload(60, 150.0, 3), "hybrid", replicas, thresholds=thresholds)
            t = (thresholds.cache_threshold, thresholds.abs_threshold, thresholds.rel_threshold)
            cases += [ArgsCase(tr("{workload}, {replicas} replicas, request {request}", workload=name,
                                  replicas=replicas, request=d["request_id"]),
                               (d["loads"], d["matches"], d["prompt_len"], *t)) for d in run.decisions]
    return tuple(cases)


def _draw_edge_case(rng: random.Random, i: int) -> ArgsCase:
    """Loads and matches at the thresholds' edges; thresholds with exact binary fractions (no rounding at the edge)."""
    n = rng.randint(1, 8)
    cache, absolute, rel = rng.choice((0.25, 0.5, 0.375, 0.125)), rng.randint(0, 12), rng.choice((1.25, 1.5, 2.0))
    low = rng.choice((0, 1, 2, 4, 8, rng.randint(0, 40)))
    high = rng.choice((low + absolute, low + absolute + 1, int(rel * low), int(rel * low) + 1, low,
                       rng.randint(low, low + 30)))
    loads = [rng.randint(low, max(low, high)) for _ in range(n)]
    loads[rng.randrange(n)], loads[rng.randrange(n)] = low, high
    prompt_len = rng.choice((16, 64, 100, 640, 1000)) * 8
    edge = int(cache * prompt_len)
    matches = [rng.choice((0, 0, edge - 8, edge, edge + 8, rng.randint(0, prompt_len))) for _ in range(n)]
    matches = [max(0, min(prompt_len - 1, m)) for m in matches]
    return ArgsCase(tr("hidden case {n}", n=i + 1), (loads, matches, prompt_len, cache, absolute, rel))


HIDDEN_EDGE_CASES = seeded(300, 11, _draw_edge_case)


def _hint(got: int, args: tuple[Any, ...]) -> Message | None:
    loads, matches, prompt_len, cache, absolute, rel = args
    low, high, best = min(loads), max(loads), max(matches)
    least = {i for i, load in enumerate(loads) if load == low}
    longest = {i for i, m in enumerate(matches) if m == best}
    over_abs, over_rel = high - low > absolute, high > rel * low
    ratio = best / prompt_len
    if over_abs and over_rel:
        return tr("max - min = {difference} > {absolute} and {high} > {rel} x {low}: imbalanced, so the least loaded, "
                  "whatever the cache holds", difference=high - low, absolute=absolute, high=high, rel=rel, low=low)
    if got in least:
        if over_abs and high == rel * low:
            return tr("max = {high} is exactly {rel} x {low}: not above it; SGLang's test is >, not >=", high=high,
                      rel=rel, low=low)
        if over_rel and high - low == absolute:
            return tr("max - min = {difference} is exactly abs_threshold: not above it; SGLang's test is >, not >=",
                      difference=high - low)
        if over_abs != over_rel:
            which = "max > rel_threshold x min" if over_abs else "max - min > abs_threshold"
            return tr("the loads are imbalanced only when both thresholds are exceeded; here {which} does not hold",
                      which=which)
    if got in longest and ratio <= cache:
        if ratio == cache:
            return tr("the longest match is {best} of {prompt_len} tokens, a ratio exactly the cache threshold "
                      "{cache}: too weak, so the least loaded; SGLang tests >, not >=", best=best,
                      prompt_len=prompt_len, cache=cache)
        return tr("the longest match is {best} of {prompt_len} tokens, a ratio not above the cache threshold {cache}: "
                  "too weak, so the least loaded", best=best, prompt_len=prompt_len, cache=cache)
    return None


def _run_hybrid(fn: Reader, case: ArgsCase) -> list[str]:
    loads, matches, prompt_len, cache, absolute, rel = case.args
    right = acceptable(*case.args)
    got = fn(list(loads), list(matches), prompt_len, cache, absolute, rel)
    value = as_int(got)
    shown = tr("loads {loads}, matches {matches} of a {prompt_len}-token prompt, cache_threshold={cache}, "
               "abs_threshold={absolute}, rel_threshold={rel}", loads=loads, matches=matches, prompt_len=prompt_len,
               cache=cache, absolute=absolute, rel=rel)
    if value is None:
        return [tr("{concept}: got {got}: a replica is a whole-number index", concept=CONCEPT, got=short(got)), shown]
    if value in right:
        return []
    if not 0 <= value < len(loads):
        return [tr("{concept}: got replica {got}, but the replicas are 0..{last}", concept=CONCEPT, got=value,
                   last=len(loads) - 1), shown]
    expected = min(right) if len(right) == 1 else tr("any of {replicas}", replicas=sorted(right))
    hint = _hint(value, case.args)
    if hint is None:
        return [tr("{concept}: got replica {got}, expected {expected}", concept=CONCEPT, got=value, expected=expected),
                shown]
    return [tr("{concept}: got replica {got}, expected {expected} ({hint})", concept=CONCEPT, got=value,
               expected=expected, hint=hint), shown]


def check_hybrid_choice(fn: Callable[..., int]) -> bool:
    """Grade ``fn(loads, matches, prompt_len, cache_threshold, abs_threshold, rel_threshold) -> replica``."""
    shown = [ArgsCase(name, tuple(args)) for name, *args in HYBRID_CASES]
    return grade("hybrid_choice（混合路由）", fn, shown, list(trace_cases()) + HIDDEN_EDGE_CASES, _run_hybrid,
                 constant_is_stub=True)


def try_hybrid_choice(fn: Callable[..., int], case: str = HYBRID_CASES[0][0]) -> dict[str, Any]:
    """Run ``fn`` on one of the chapter's named cases; returns its inputs and what ``fn`` returned."""
    named = {key: (name, args) for name, *args in HYBRID_CASES for key in (str.__str__(name), str(name))}
    if case not in named:      # a case goes by its English name or by the one the grader showed
        raise ValueError(tr("unknown case {case!r}; the cases are: {cases}", case=str.__str__(case),
                            cases="; ".join(str(name) for name, *_ in HYBRID_CASES)))
    name, (loads, matches, prompt_len, cache, absolute, rel) = named[case]
    inputs = {"loads": list(loads), "matches": list(matches), "prompt_len": prompt_len,
              "cache_threshold": cache, "abs_threshold": absolute, "rel_threshold": rel}
    return {"case": str(name), "inputs": inputs, "output": fn(*inputs.values())}   # positionally, as the grader calls


def passed_or_reference(fn: Callable[..., int]) -> Callable[..., int]:
    """Grade ``fn`` (printing the verdict); return it if it passed, else the shipped reference, so later cells run."""
    return fn if check_hybrid_choice(fn) else reference.hybrid_choice
