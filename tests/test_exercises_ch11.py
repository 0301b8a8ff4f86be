"""The chapter 11 grader (the hybrid routing decision) accepts right answers in any style and rejects wrong ones."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pagedkv_edu.exercises import ch11
from pagedkv_edu.exercises.grading import ArgsCase
from pagedkv_edu.exercises.solutions import ch11 as sol
from pagedkv_edu.sim.routing import HybridThresholds, hybrid_choice, hybrid_policy, route
from pagedkv_edu.sim.routing_workloads import tenants
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)


def _least(loads: list[int]) -> int:
    return loads.index(min(loads))


def _decide(imbalanced: bool, loads: list[int], matches: list[int], p: int, c: float) -> int:
    if imbalanced:
        return _least(loads)
    best = matches.index(max(matches))
    return best if matches[best] / p > c else _least(loads)


_counter = itertools.count()


def _round_robin_fallback(loads, matches, p, c, a, r):     # falls back to round-robin instead of least loaded
    if max(loads) - min(loads) > a and max(loads) > r * min(loads) or max(matches) / p <= c:
        return next(_counter) % len(loads)
    return matches.index(max(matches))


WRONG = {
    "ignores the relative threshold": lambda l, m, p, c, a, r: _decide(max(l) - min(l) > a, l, m, p, c),
    "ignores the absolute threshold": lambda l, m, p, c, a, r: _decide(max(l) > r * min(l), l, m, p, c),
    ">= on the absolute threshold": lambda l, m, p, c, a, r: _decide(max(l) - min(l) >= a and max(l) > r * min(l),
                                                                       l, m, p, c),
    ">= on the relative threshold": lambda l, m, p, c, a, r: _decide(max(l) - min(l) > a and max(l) >= r * min(l),
                                                                       l, m, p, c),
    ">= on the match ratio": lambda l, m, p, c, a, r: (
        _least(l) if max(l) - min(l) > a and max(l) > r * min(l)
        else (m.index(max(m)) if max(m) / p >= c else _least(l))),
    "falls back to round-robin": _round_robin_fallback,
    "ignores the match-ratio threshold": lambda l, m, p, c, a, r: _decide(
        max(l) - min(l) > a and max(l) > r * min(l), l, m, p, -1.0),
    "either threshold makes it imbalanced": lambda l, m, p, c, a, r: _decide(
        max(l) - min(l) > a or max(l) > r * min(l), l, m, p, c),
    "most loaded when imbalanced": lambda l, m, p, c, a, r: (
        l.index(max(l)) if max(l) - min(l) > a and max(l) > r * min(l) else sol.hybrid_choice(l, m, p, c, a, r)),
    "ratio over the matched replica's load": lambda l, m, p, c, a, r: _decide(
        max(l) - min(l) > a and max(l) > r * min(l), l, m, max(1, l[m.index(max(m))]) * p, c),
}


def _numpy(loads, matches, prompt_len, cache_threshold, abs_threshold, rel_threshold):
    l, m = np.asarray(loads), np.asarray(matches)
    if l.max() - l.min() > abs_threshold and l.max() > rel_threshold * l.min():
        return np.argmin(l)
    return np.argmax(m) if m.max() / prompt_len > cache_threshold else np.argmin(l)


def _sorted_keys(loads, matches, prompt_len, cache_threshold, abs_threshold, rel_threshold):
    order = sorted(range(len(loads)), key=lambda i: (loads[i], -matches[i]))     # ties: the better match
    hi, lo = max(loads), loads[order[0]]
    balanced = not (hi - lo > abs_threshold and hi > rel_threshold * lo)
    best = sorted(range(len(matches)), key=lambda i: (-matches[i], loads[i]))[0]  # ties: the less loaded
    if balanced and matches[best] * 1.0 > cache_threshold * prompt_len:
        return best
    return order[0]


def _last_of_ties(loads, matches, prompt_len, cache_threshold, abs_threshold, rel_threshold):
    n = len(loads)
    least = max(i for i in range(n) if loads[i] == min(loads))
    if max(loads) - min(loads) <= abs_threshold or max(loads) <= rel_threshold * min(loads):
        best = max(i for i in range(n) if matches[i] == max(matches))
        if matches[best] / prompt_len > cache_threshold:
            return float(best)                 # a whole float is a whole number
    return least


RIGHT = {"reference": sol.hybrid_choice, "the package's": hybrid_choice, "numpy": _numpy,
         "sorted keys": _sorted_keys, "last of equals, de Morgan": _last_of_ties}


@pytest.mark.parametrize("name", RIGHT)
def test_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch11.check_hybrid_choice(RIGHT[name]) is True
    assert "✓ hybrid_choice（混合路由）: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", WRONG)
def test_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch11.check_hybrid_choice(WRONG[name]) is False
    out = capsys.readouterr().out
    assert "✗ hybrid_choice（混合路由）: failed" in out
    assert "混合路由（hybrid routing）" in out.splitlines()[2]      # the first line of the failure names the concept


def test_wrong_answers_fail_on_hidden_cases_too() -> None:
    """Each wrong variant is also caught by the trace and edge cases alone, not only by the shown cases."""
    hidden = list(ch11.trace_cases()) + ch11.HIDDEN_EDGE_CASES
    for name, fn in WRONG.items():
        if name == "falls back to round-robin":
            continue     # stateful: judged on the shown cases above
        assert any(int(fn(list(c.args[0]), list(c.args[1]), *c.args[2:])) not in ch11.acceptable(*c.args)
                   for c in hidden), name


def test_hints_name_the_cause(capsys: pytest.CaptureFixture[str]) -> None:
    expected = {">= on the absolute threshold": "exactly abs_threshold", ">= on the relative threshold": "exactly 1.5 x",
                ">= on the match ratio": "SGLang tests >, not >=",
                "ignores the match-ratio threshold": "too weak, so the least loaded",
                "ignores the absolute threshold": "both thresholds are exceeded"}
    for name, hint in expected.items():
        ch11.check_hybrid_choice(WRONG[name])
        assert hint in capsys.readouterr().out, name


def test_stubs_are_not_solved_and_show_no_answers(capsys: pytest.CaptureFixture[str]) -> None:
    def stub(*args):
        raise NotImplementedError("your turn")

    for fn in (stub, lambda *a: None, lambda *a: 0):
        assert ch11.check_hybrid_choice(fn) is False
        out = capsys.readouterr().out
        assert "not solved yet" in out and "expected" not in out


def test_a_bad_return_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert ch11.check_hybrid_choice(lambda l, m, *a: len(l)) is False
    assert "the replicas are 0.." in capsys.readouterr().out
    assert ch11.check_hybrid_choice(lambda l, m, *a: "replica 0" if len(l) > 1 else 0) is False
    assert "whole-number index" in capsys.readouterr().out


def test_the_reference_agrees_with_every_case() -> None:
    cases = [ArgsCase(n, tuple(a)) for n, *a in ch11.HYBRID_CASES] + list(ch11.trace_cases()) + ch11.HIDDEN_EDGE_CASES
    for c in cases:
        assert sol.hybrid_choice(list(c.args[0]), list(c.args[1]), *c.args[2:]) in ch11.acceptable(*c.args), c.name
        assert hybrid_choice(*c.args) in ch11.acceptable(*c.args), c.name


def test_hidden_cases_reach_every_edge() -> None:
    args = [c.args for c in ch11.HIDDEN_EDGE_CASES]
    assert any(max(l) - min(l) == a and max(l) > r * min(l) for l, m, p, c, a, r in args)
    assert any(max(l) == r * min(l) and max(l) - min(l) > a for l, m, p, c, a, r in args)
    assert any(max(m) == c * p for l, m, p, c, a, r in args)
    assert any(len(l) == 1 for l, *_ in args) and {3, 5, 6} <= {len(l) for l, *_ in args}
    trace = list(ch11.trace_cases())
    assert any(max(c.args[0]) - min(c.args[0]) > c.args[4] and max(c.args[0]) > c.args[5] * min(c.args[0])
               for c in trace)                                  # the traces include imbalanced moments


def test_try_runs_one_named_case() -> None:
    out = ch11.try_hybrid_choice(sol.hybrid_choice, "one replica")
    assert out["inputs"]["loads"] == [7] and out["output"] == 0
    with pytest.raises(ValueError, match="unknown case"):
        ch11.try_hybrid_choice(sol.hybrid_choice, "no such case")


def test_passed_or_reference_and_the_readers_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert ch11.passed_or_reference(_numpy) is _numpy
    fallback = ch11.passed_or_reference(WRONG["ignores the absolute threshold"])
    assert fallback([1, 0], [0, 0], 10, 0.3, 8, 1.5) in (0, 1) and fallback is not WRONG["ignores the absolute threshold"]
    requests = tenants(40, 60.0)
    mine = route(requests, hybrid_policy(_numpy, HybridThresholds()), 3)
    assert mine.policy == "hybrid (_numpy)"
    assert [o.replica for o in mine.outcomes] == [o.replica for o in route(requests, "hybrid", 3).outcomes]


# --- in zh-TW -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [*WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = {**WRONG, "raises": lambda l, m, *a: m[len(m)], "stub": lambda *a: 0}[name]
    assert ch11.check_hybrid_choice(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith(("✗ hybrid_choice（混合路由）：未通過", "○ hybrid_choice（混合路由）：尚未作答")), out
    assert untranslated(out) == []


@pytest.mark.usefixtures("zh_tw")
def test_a_hint_in_zh_tw(capsys: pytest.CaptureFixture[str]) -> None:
    ch11.check_hybrid_choice(WRONG[">= on the match ratio"])
    out = capsys.readouterr().out
    assert "比例恰好等於快取門檻 0.5：太弱，所以選最少負載的副本；SGLang 的判斷是 >，不是 >=" in out, out
    with pytest.raises(ValueError, match="沒有名為 'no such case' 的案例；可用的案例有：負載平衡，長匹配勝出;"):
        ch11.try_hybrid_choice(sol.hybrid_choice, "no such case")
    shown = str(ch11.HYBRID_CASES[-1][0])              # a case by the name the grader showed, in Chinese
    assert ch11.try_hybrid_choice(sol.hybrid_choice, shown) == \
        ch11.try_hybrid_choice(sol.hybrid_choice, str.__str__(ch11.HYBRID_CASES[-1][0]))
