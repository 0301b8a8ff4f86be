"""The chapter 1 grader accepts right answers in any style and rejects wrong ones, hidden cases included."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch

from pagedkv_edu.exercises import ch1
from pagedkv_edu.exercises.solutions import ch1 as solution
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)


# --- first_fit ------------------------------------------------------------------------------------
_FIT_KEY = {(holes, size): solution.first_fit(holes, size) for _, holes, size in ch1.FIRST_FIT_CASES}


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
    assert ch1.check_first_fit(FIT_RIGHT[name]) is True
    assert "✓ first_fit（首次適配）: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", FIT_WRONG)
def test_first_fit_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch1.check_first_fit(FIT_WRONG[name]) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ first_fit（首次適配）: failed") and out.count("expected") == 1


@pytest.mark.parametrize("name", [*FIT_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_first_fit_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = {**FIT_WRONG, "raises": lambda holes, size: holes[9], "stub": lambda holes, size: None}[name]
    assert ch1.check_first_fit(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith(("✗ first_fit（首次適配）：未通過", "○ first_fit（首次適配）：尚未作答")), out
    assert untranslated(out) == []


def test_first_fit_messages(capsys: pytest.CaptureFixture[str]) -> None:
    ch1.check_first_fit(_best_fit)
    assert "comes first in memory" in capsys.readouterr().out
    ch1.check_first_fit(_buddy)
    assert "hidden case" in capsys.readouterr().out   # every shown case asks for 2048, a power of two


def test_first_fit_stub(capsys: pytest.CaptureFixture[str]) -> None:
    assert ch1.check_first_fit(lambda holes, size: None) is False
    assert capsys.readouterr().out == ("○ first_fit（首次適配）: not solved yet (it returns None). "
                                       "Write your version above and run the cell again.\n")
