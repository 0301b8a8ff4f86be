"""The chapter 6 grader accepts right answers in any style and rejects wrong ones, hidden cases included."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pagedkv_edu.block_manager import BlockManager
from pagedkv_edu.exercises import ch6
from pagedkv_edu.exercises.grading import ArgsCase
from pagedkv_edu.exercises.solutions import ch6 as sol6
from pagedkv_edu.scheduler import PagedMemory


# --- can_admit ------------------------------------------------------------------------------------
def _admit_cases() -> list[ArgsCase]:
    return [ArgsCase(name, tuple(args)) for name, *args in ch6.ADMIT_CASES] + ch6.HIDDEN_ADMIT_CASES[:60]


def test_can_admit_solution_agrees_with_the_scheduler() -> None:
    for case in _admit_cases():
        tokens, b, free, watermark, running = case.args
        manager = BlockManager(free + running, b)
        for i in range(running):
            manager.add_sequence(f"running-{i}", 1)
        assert manager.pool.num_free == free, case.name
        assert PagedMemory(manager, watermark).can_admit("new", tokens) is sol6.can_admit(*case.args), case.name


def test_hidden_admit_cases_cover_the_edges() -> None:
    args = [c.args for c in ch6.HIDDEN_ADMIT_CASES]
    assert {3, 5, 6, 12} <= {b for _, b, _, _, _ in args}
    assert any(r == 1 and w > 0 for *_, w, r in args)
    assert any(-(-n // b) + w == f and r > 0 for n, b, f, w, r in args)   # exact fits with the watermark


_ADMIT_KEY = {tuple(args): sol6.can_admit(*args) for _, *args in ch6.ADMIT_CASES}

ADMIT_WRONG = {
    "rounds down": lambda n, b, f, w, r: n // b + (w if r else 0) <= f,
    "no watermark": lambda n, b, f, w, r: -(-n // b) <= f,
    "watermark even when idle": lambda n, b, f, w, r: -(-n // b) + w <= f,
    "off by one": lambda n, b, f, w, r: -(-n // b) + (w if r else 0) < f,
    "watermark only for several running": lambda n, b, f, w, r: -(-n // b) + (w if r > 1 else 0) <= f,
    "watermark minus the one running": lambda n, b, f, w, r: -(-n // b) + max(0, w - (r == 1)) * (r > 0) <= f,
    "power-of-two shift": lambda n, b, f, w, r: ((n + b - 1) >> (b.bit_length() - 1)) + (w if r else 0) <= f,
    "answer key": lambda n, b, f, w, r: _ADMIT_KEY.get((n, b, f, w, r), -(-n // b) <= f),
}


def _admit_numpy(n: int, b: int, f: int, w: int, r: int) -> np.bool_:
    return np.ceil(n / b) + np.where(r > 0, w, 0) <= f


def _admit_torch(n: int, b: int, f: int, w: int, r: int) -> torch.Tensor:
    need = torch.div(torch.tensor(n), b, rounding_mode="floor") + (n % b > 0)
    return need + (w if r else 0) <= f


def _admit_loop(n: int, b: int, f: int, w: int, r: int) -> bool:
    blocks, stored = 0, 0
    while stored < n:
        blocks, stored = blocks + 1, stored + b
    reserve = w if r > 0 else 0
    return f - blocks >= reserve


ADMIT_RIGHT = {"reference": sol6.can_admit, "numpy": _admit_numpy, "torch": _admit_torch, "loop": _admit_loop,
               "math.ceil": lambda n, b, f, w, r: math.ceil(n / b) <= f - (w if r else 0)}


@pytest.mark.parametrize("name", ADMIT_RIGHT)
def test_can_admit_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch6.check_can_admit(ADMIT_RIGHT[name]) is True
    assert "✓ can_admit: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", ADMIT_WRONG)
def test_can_admit_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch6.check_can_admit(ADMIT_WRONG[name]) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ can_admit: failed") and out.count("expected") == 1


def test_can_admit_messages(capsys: pytest.CaptureFixture[str]) -> None:
    ch6.check_can_admit(ADMIT_WRONG["watermark only for several running"])
    out = capsys.readouterr().out
    assert "hidden case" in out and "running=1)" in out and "1 request running" in out
    ch6.check_can_admit(lambda n, b, f, w, r: int(sol6.can_admit(n, b, f, w, r)))
    assert "the answer is True or False" in capsys.readouterr().out


@pytest.mark.parametrize("stub", [lambda *a: False, lambda *a: True, lambda *a: None])
def test_can_admit_stub(stub, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch6.check_can_admit(stub) is False
    out = capsys.readouterr().out
    assert out.startswith("○ can_admit: not solved yet") and "expected" not in out and "tokens=" not in out
