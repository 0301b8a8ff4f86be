"""The chapter 0 grader accepts right answers in any style and rejects wrong ones, hidden cases included.

The reader gets a model's config (a dict, as in its ``config.json``), so the GQA mistake, counting
``num_attention_heads`` instead of ``num_key_value_heads``, can be made, and the grader names it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pagedkv_edu.exercises import ch0
from pagedkv_edu.exercises.solutions import ch0 as solution
from pagedkv_edu.specs import MODELS, spec_from_config
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

GRADER = "kv_bytes_per_token（每個 token 的 KV 位元組）"


def _key(c: dict, b: int) -> tuple:
    return tuple(sorted(c.items())) + (b,)


# --- kv_bytes_per_token ---------------------------------------------------------------------------
_KV_KEY = {_key(*c.args): solution.kv_bytes_per_token(*c.args) for c in ch0.KV_BYTES_CASES}


def _kv_answer_key(c: dict, b: int) -> int:
    """The committed notebook's printed answers, looked up; a guess for anything else."""
    return _KV_KEY.get(_key(c, b), 32 * 1024)


def _kv_shift(c: dict, b: int) -> int:
    """A power-of-two trick: shifting by log2(head_dim) is a multiply only when head_dim is 2**k."""
    return (c["num_hidden_layers"] * c["num_key_value_heads"] * 2 * b) << (c["head_dim"].bit_length() - 1)


def _layers(c: dict) -> int:
    return c["num_hidden_layers"]


def _kv(c: dict) -> int:
    return c["num_key_value_heads"]


def _query_heads(c: dict) -> int:
    return c["num_attention_heads"]


KV_WRONG = {
    "query heads (GQA ignored)": lambda c, b: _layers(c) * _query_heads(c) * c["head_dim"] * 2 * b,
    "hidden size (GQA ignored)": lambda c, b: _layers(c) * c["hidden_size"] * 2 * b,
    "query heads and no factor 2": lambda c, b: _layers(c) * _query_heads(c) * c["head_dim"] * b,
    "no factor 2": lambda c, b: _layers(c) * _kv(c) * c["head_dim"] * b,
    "bits": lambda c, b: _layers(c) * _kv(c) * c["head_dim"] * 2 * b * 8,
    "elements, not bytes": lambda c, b: _layers(c) * _kv(c) * c["head_dim"] * 2,
    "answer key": _kv_answer_key,
    "power-of-two shift": _kv_shift,
    "one layer short": lambda c, b: (_layers(c) - 1) * _kv(c) * c["head_dim"] * 2 * b,
    "a fraction": lambda c, b: _layers(c) * _kv(c) * c["head_dim"] * 2 * b / 3,
    "crashes": lambda c, b: 1 / 0,
}

KV_RIGHT = {
    "the reference": solution.kv_bytes_per_token,
    "head_dim from hidden_size": lambda c, b: _layers(c) * _kv(c) * (c["hidden_size"] // _query_heads(c)) * 2 * b,
    "through spec_from_config": lambda c, b: spec_from_config(c).kv_bytes_per_token // 2 * b,
    "numpy": lambda c, b: np.prod([_layers(c), _kv(c), c["head_dim"], 2, b]),
    "whole float": lambda c, b: 2.0 * _layers(c) * _kv(c) * c["head_dim"] * b,
    "torch": lambda c, b: torch.tensor([_layers(c), _kv(c), c["head_dim"], 2, b]).prod(),
    "a loop over layers": lambda c, b: sum(2 * _kv(c) * c["head_dim"] * b for _ in range(_layers(c))),
    "math.prod": lambda c, b: math.prod((_layers(c), _kv(c), c["head_dim"], b, 2)),
    "changes the dict it is given": lambda c, b: c.pop("num_hidden_layers") * c.pop("num_key_value_heads")
    * c["head_dim"] * 2 * b,
}


def test_the_configs_are_the_book_models_shapes() -> None:
    for spec in MODELS.values():
        config = ch0.config_of(spec)
        assert solution.kv_bytes_per_token(config, spec.bytes_per_element) == spec.kv_bytes_per_token
        assert spec_from_config(config, dtype=spec.dtype).kv_bytes_per_token == spec.kv_bytes_per_token


def test_most_hidden_cases_use_gqa_so_query_heads_cannot_pass() -> None:
    groups = [c.args[0]["num_attention_heads"] // c.args[0]["num_key_value_heads"] for c in ch0.HIDDEN_KV_BYTES]
    assert sum(g > 1 for g in groups) > 0.8 * len(groups) and 1 in groups


@pytest.mark.parametrize("name", KV_RIGHT)
def test_kv_bytes_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch0.check_kv_bytes_per_token(KV_RIGHT[name]) is True
    assert f"✓ {GRADER}: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", KV_WRONG)
def test_kv_bytes_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch0.check_kv_bytes_per_token(KV_WRONG[name]) is False
    out = capsys.readouterr().out
    assert out.startswith(f"✗ {GRADER}: failed")
    assert out.count("expected") <= 1, "only the first failing case is shown in full"


@pytest.mark.parametrize("name", ["query heads (GQA ignored)", "hidden size (GQA ignored)"])
def test_the_gqa_mistake_gets_its_own_hint(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    ch0.check_kv_bytes_per_token(KV_WRONG[name])
    out = capsys.readouterr().out
    assert "llama-3.2-1b:" in out and "4 times too many" in out
    assert "num_attention_heads (32), the query heads" in out and "num_key_value_heads (8)" in out


def test_the_gqa_hint_also_names_a_second_slip(capsys: pytest.CaptureFixture[str]) -> None:
    ch0.check_kv_bytes_per_token(KV_WRONG["query heads and no factor 2"])
    out = capsys.readouterr().out
    assert "the query heads" in out and "both K and V" in out and "times too many" not in out


def test_kv_bytes_messages(capsys: pytest.CaptureFixture[str]) -> None:
    ch0.check_kv_bytes_per_token(KV_WRONG["no factor 2"])
    out = capsys.readouterr().out
    assert "both K and V" in out and "query heads" not in out
    ch0.check_kv_bytes_per_token(KV_WRONG["elements, not bytes"])
    assert "multiply by bytes_per_element" in capsys.readouterr().out
    ch0.check_kv_bytes_per_token(KV_WRONG["crashes"])
    assert "raised ZeroDivisionError: division by zero" in capsys.readouterr().out
    ch0.check_kv_bytes_per_token(_kv_answer_key)
    out = capsys.readouterr().out
    assert "hidden case" in out and "of 200 hidden cases" in out


@pytest.mark.parametrize("stub", [lambda *a: None, lambda *a: 0])
def test_kv_bytes_stub_is_not_solved_and_shows_no_cases(stub, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch0.check_kv_bytes_per_token(stub) is False
    out = capsys.readouterr().out
    assert out.startswith(f"○ {GRADER}: not solved yet") and "expected" not in out and "✗" not in out


# --- in zh-TW -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [*KV_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_kv_bytes_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = {**KV_WRONG, "raises": lambda c, b: c["num_layers"], "stub": lambda c, b: None}[name]
    assert ch0.check_kv_bytes_per_token(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith(("✗ kv_bytes_per_token（每個 token 的 KV 位元組）：未通過",
                           "○ kv_bytes_per_token（每個 token 的 KV 位元組）：尚未作答")), out
    assert untranslated(out) == []


@pytest.mark.usefixtures("zh_tw")
def test_the_gqa_hint_in_zh_tw(capsys: pytest.CaptureFixture[str]) -> None:
    ch0.check_kv_bytes_per_token(KV_WRONG["query heads and no factor 2"])
    out = capsys.readouterr().out
    assert "在分組查詢注意力下，每 4 個查詢頭共用一個 K/V 頭" in out and "除此之外，只有一半" in out, out
