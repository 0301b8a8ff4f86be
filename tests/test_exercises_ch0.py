"""The chapter 0 grader accepts right answers in any style and rejects wrong ones, hidden cases included."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pagedkv_edu.exercises import ch0
from pagedkv_edu.exercises.solutions import ch0 as solution


# --- kv_bytes_per_token ---------------------------------------------------------------------------
_KV_KEY = {c.args: solution.kv_bytes_per_token(*c.args) for c in ch0.KV_BYTES_CASES}


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
    assert ch0.check_kv_bytes_per_token(KV_RIGHT[name]) is True
    assert "✓ kv_bytes_per_token（每個 token 的 KV 位元組）: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", KV_WRONG)
def test_kv_bytes_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch0.check_kv_bytes_per_token(KV_WRONG[name]) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ kv_bytes_per_token（每個 token 的 KV 位元組）: failed")
    assert out.count("expected") <= 1, "only the first failing case is shown in full"


def test_kv_bytes_messages(capsys: pytest.CaptureFixture[str]) -> None:
    ch0.check_kv_bytes_per_token(KV_WRONG["no factor 2"])
    assert "both K and V" in capsys.readouterr().out
    ch0.check_kv_bytes_per_token(KV_WRONG["crashes"])
    assert "raised ZeroDivisionError: division by zero" in capsys.readouterr().out
    ch0.check_kv_bytes_per_token(_kv_answer_key)
    out = capsys.readouterr().out
    assert "hidden case" in out and "of 200 hidden cases" in out


@pytest.mark.parametrize("stub", [lambda *a: None, lambda *a: 0])
def test_kv_bytes_stub_is_not_solved_and_shows_no_cases(stub, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch0.check_kv_bytes_per_token(stub) is False
    out = capsys.readouterr().out
    assert out.startswith("○ kv_bytes_per_token（每個 token 的 KV 位元組）: not solved yet") and "expected" not in out and "✗" not in out
