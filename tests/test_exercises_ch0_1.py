"""The chapter 0-1 graders accept the solutions and reject broken variants."""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv_edu.exercises import ch0_1
from pagedkv_edu.exercises.solutions import ch0_1 as solution


def test_kv_bytes_checker_accepts_solution(capsys) -> None:
    assert ch0_1.check_kv_bytes_per_token(solution.kv_bytes_per_token)
    assert "passed" in capsys.readouterr().out


def test_kv_bytes_checker_rejects_missing_factor_two(capsys) -> None:
    assert not ch0_1.check_kv_bytes_per_token(lambda l, h, d, b: l * h * d * b)
    assert "both K and V" in capsys.readouterr().out


def test_kv_bytes_checker_rejects_wrong_units_and_crashes(capsys) -> None:
    assert not ch0_1.check_kv_bytes_per_token(lambda l, h, d, b: l * h * d * 2 * b * 8)  # bits
    assert not ch0_1.check_kv_bytes_per_token(lambda l, h, d, b: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out


def test_first_fit_checker_accepts_solution() -> None:
    assert ch0_1.check_first_fit(solution.first_fit)


def _best_fit(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    fitting = [(hole, start) for start, hole in holes if hole >= size]
    return min(fitting)[1] if fitting else None


def _largest(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    start, hole = max(holes, key=lambda h: h[1])
    return start if hole >= size else None


def _unsorted_first(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    return next((start for start, hole in holes if hole >= size), None)


def _total_free(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    return holes[0][0] if sum(h for _, h in holes) >= size else None


def test_first_fit_checker_rejects_broken_variants(capsys) -> None:
    for broken in (_best_fit, _largest, _unsorted_first, _total_free):
        assert not ch0_1.check_first_fit(broken), broken.__name__
    assert "expected" in capsys.readouterr().out
