"""The chapter 0-1 graders accept right answers in any style and reject wrong ones, hidden cases included."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from pagedkv_edu.exercises import ch0_1
from pagedkv_edu.exercises.solutions import ch0_1 as solution


# --- kv_bytes_per_token ---------------------------------------------------------------------------
_KV_KEY = {c.args: solution.kv_bytes_per_token(*c.args) for c in ch0_1.KV_BYTES_CASES}


def _kv_answer_key(l: int, h: int, d: int, b: int) -> int:
    """The committed notebook's printed answers, looked up; a guess for anything else."""
    return _KV_KEY.get((l, h, d, b), 32 * 1024)


def _kv_shift(l: int, h: int, d: int, b: int) -> int:
    """A power-of-two trick: shifting by log2(head_dim) is a multiply only when head_dim is 2**k."""
    return (l * h * 2 * b) << (d.bit_length() - 1)


KV_WRONG = {
    "no factor 2": lambda l, h, d, b: l * h * d * b,
    "bits": lambda l, h, d, b: l * h * d * 2 * b * 8,
    "elements, not bytes": lambda l, h, d, b: l * h * d * 2,
    "answer key": _kv_answer_key,
    "power-of-two shift": _kv_shift,
    "one layer short": lambda l, h, d, b: (l - 1) * h * d * 2 * b,
    "a fraction": lambda l, h, d, b: l * h * d * 2 * b / 3,
    "crashes": lambda l, h, d, b: 1 / 0,
}

KV_RIGHT = {
    "integers": solution.kv_bytes_per_token,
    "numpy": lambda l, h, d, b: np.prod([l, h, d, 2, b]),
    "whole float": lambda l, h, d, b: 2.0 * l * h * d * b,
    "torch": lambda l, h, d, b: torch.tensor([l, h, d, 2, b]).prod(),
    "a loop over layers": lambda l, h, d, b: sum(2 * h * d * b for _ in range(l)),
    "math.prod": lambda l, h, d, b: math.prod((l, h, d, b, 2)),
}


@pytest.mark.parametrize("name", KV_RIGHT)
def test_kv_bytes_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch0_1.check_kv_bytes_per_token(KV_RIGHT[name]) is True
    assert "✓ kv_bytes_per_token: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", KV_WRONG)
def test_kv_bytes_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch0_1.check_kv_bytes_per_token(KV_WRONG[name]) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ kv_bytes_per_token: failed")
    assert out.count("expected") <= 1, "only the first failing case is shown in full"


def test_kv_bytes_messages(capsys: pytest.CaptureFixture[str]) -> None:
    ch0_1.check_kv_bytes_per_token(KV_WRONG["no factor 2"])
    assert "both K and V" in capsys.readouterr().out
    ch0_1.check_kv_bytes_per_token(KV_WRONG["crashes"])
    assert "raised ZeroDivisionError: division by zero" in capsys.readouterr().out
    ch0_1.check_kv_bytes_per_token(_kv_answer_key)
    out = capsys.readouterr().out
    assert "hidden case" in out and "of 200 hidden cases" in out


@pytest.mark.parametrize("stub", [lambda *a: None, lambda *a: 0])
def test_kv_bytes_stub_is_not_solved_and_shows_no_cases(stub, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch0_1.check_kv_bytes_per_token(stub) is False
    out = capsys.readouterr().out
    assert out.startswith("○ kv_bytes_per_token: not solved yet") and "expected" not in out and "✗" not in out


# --- first_fit ------------------------------------------------------------------------------------
_FIT_KEY = {(holes, size): solution.first_fit(holes, size) for _, holes, size in ch0_1.FIRST_FIT_CASES}


def _fit_answer_key(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    return _FIT_KEY.get((tuple(holes), size), holes[0][0] if holes else None)


def _best_fit(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    fitting = [(hole, start) for start, hole in holes if hole >= size]
    return min(fitting)[1] if fitting else None


def _largest(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    if not holes:
        return None
    start, hole = max(holes, key=lambda h: h[1])
    return start if hole >= size else None


def _unsorted_first(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    return next((start for start, hole in holes if hole >= size), None)


def _total_free(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    return min(s for s, _ in holes) if sum(h for _, h in holes) >= size else None


def _buddy(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    """Rounds the request up to a power of two, as a buddy allocator would: wrong for an exact fit of 1842."""
    return solution.first_fit(holes, 1 << (size - 1).bit_length())


def _strict(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    return next((start for start, hole in sorted(holes) if hole > size), None)


FIT_WRONG = {"best fit": _best_fit, "largest": _largest, "unsorted first": _unsorted_first,
             "total free": _total_free, "buddy power of two": _buddy, "strict": _strict, "answer key": _fit_answer_key}


def _fit_numpy(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    if not holes:
        return None
    a = np.array(sorted(holes))
    fits = np.nonzero(a[:, 1] >= size)[0]
    return a[fits[0], 0] if len(fits) else None   # an np.int64


def _fit_min(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    return min((start for start, hole in holes if hole >= size), default=None)


def _fit_torch(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    starts = torch.tensor([s for s, h in holes if h >= size], dtype=torch.long)
    return starts.min() if len(starts) else None   # a 0-d tensor


FIT_RIGHT = {"reference": solution.first_fit, "numpy": _fit_numpy, "min": _fit_min, "torch": _fit_torch}


@pytest.mark.parametrize("name", FIT_RIGHT)
def test_first_fit_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch0_1.check_first_fit(FIT_RIGHT[name]) is True
    assert "✓ first_fit: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", FIT_WRONG)
def test_first_fit_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch0_1.check_first_fit(FIT_WRONG[name]) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ first_fit: failed") and out.count("expected") == 1


def test_first_fit_messages(capsys: pytest.CaptureFixture[str]) -> None:
    ch0_1.check_first_fit(_best_fit)
    assert "comes first in memory" in capsys.readouterr().out
    ch0_1.check_first_fit(_buddy)
    assert "hidden case" in capsys.readouterr().out   # every shown case asks for 2048, a power of two


def test_first_fit_stub(capsys: pytest.CaptureFixture[str]) -> None:
    assert ch0_1.check_first_fit(lambda holes, size: None) is False
    assert capsys.readouterr().out == ("○ first_fit: not solved yet (it returns None). "
                                       "Write your version above and run the cell again.\n")
