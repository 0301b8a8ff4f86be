"""Chapter 9's grader (last-block waste) accepts right answers in any style and rejects wrong ones, hidden cases included."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pagedkv_edu.exercises import ch9
from pagedkv_edu.exercises.solutions import ch9 as sol9
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)


# --- last_block_waste -----------------------------------------------------------------------------
def test_hidden_waste_cases_cover_the_edges() -> None:
    args = [c.args for c in ch9.HIDDEN_WASTE_CASES]
    assert {3, 5, 6, 12} <= {b for _, b in args}
    assert {0, 1} <= {n for n, _ in args}
    assert any(n > 0 and n % b == 0 and b & (b - 1) for n, b in args)


_WASTE_KEY = {(n, b): sol9.last_block_waste(n, b) for _, n, b in ch9.WASTE_CASES}

WASTE_WRONG = {
    "filled, not empty": lambda n, b: n % b,
    "a whole block when full": lambda n, b: b - n % b,
    "rounds down": lambda n, b: (n // b) * b - n,
    "crashes": lambda n, b: 1 / 0,
    "power-of-two mask": lambda n, b: -n & (b - 1),
    "answer key": lambda n, b: _WASTE_KEY.get((n, b), 0),
    "a fraction": lambda n, b: (b - n % b) % b + 0.5,
}

WASTE_RIGHT = {
    "reference": sol9.last_block_waste,
    "modulo of the negative": lambda n, b: (-n) % b,
    "numpy": lambda n, b: np.int64(np.ceil(n / b) * b - n),
    "whole float": lambda n, b: math.ceil(n / b) * b - float(n),
    "torch": lambda n, b: (-torch.tensor(n)) % b,
    "loop": lambda n, b: next(w for w in range(b) if (n + w) % b == 0),
}


@pytest.mark.parametrize("name", WASTE_RIGHT)
def test_last_block_waste_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch9.check_last_block_waste(WASTE_RIGHT[name]) is True
    assert "✓ last_block_waste（最後一個區塊的浪費）: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", WASTE_WRONG)
def test_last_block_waste_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch9.check_last_block_waste(WASTE_WRONG[name]) is False
    assert capsys.readouterr().out.startswith("✗ last_block_waste（最後一個區塊的浪費）: failed")


def test_last_block_waste_messages(capsys: pytest.CaptureFixture[str]) -> None:
    ch9.check_last_block_waste(WASTE_WRONG["filled, not empty"])
    out = capsys.readouterr().out
    assert "got 9, expected 7 (that is the filled slots of the last block" in out
    ch9.check_last_block_waste(WASTE_WRONG["power-of-two mask"])
    assert "-n & (B - 1) is the waste only when B is a power of two" in capsys.readouterr().out
    ch9.check_last_block_waste(WASTE_WRONG["crashes"])
    assert "ZeroDivisionError" in capsys.readouterr().out


def test_last_block_waste_stub(capsys: pytest.CaptureFixture[str]) -> None:
    assert ch9.check_last_block_waste(lambda n, b: -1) is False
    assert capsys.readouterr().out == ("○ last_block_waste（最後一個區塊的浪費）: not solved yet (it returns -1 whatever it is given). "
                                       "Write your version above and run the cell again.\n")


# --- in zh-TW -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [*WASTE_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_last_block_waste_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = {**WASTE_WRONG, "raises": lambda n, b: [][n], "stub": lambda n, b: None}[name]
    assert ch9.check_last_block_waste(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith(("✗ last_block_waste（最後一個區塊的浪費）：未通過",
                           "○ last_block_waste（最後一個區塊的浪費）：尚未作答")), out
    assert untranslated(out) == []


@pytest.mark.usefixtures("zh_tw")
def test_last_block_waste_hints_in_zh_tw(capsys: pytest.CaptureFixture[str]) -> None:
    ch9.check_last_block_waste(WASTE_WRONG["filled, not empty"])
    assert "得到 9，應為 7（這是最後一個區塊裡已填入的槽位數" in capsys.readouterr().out
    ch9.check_last_block_waste(WASTE_WRONG["power-of-two mask"])
    assert "只有在 B 是二的冪次時，-n & (B - 1) 才等於浪費" in capsys.readouterr().out
