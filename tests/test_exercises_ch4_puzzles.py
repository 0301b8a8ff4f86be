"""Chapter 4's warm-up puzzle graders accept right kernels in other styles and reject plausible wrong ones."""

from __future__ import annotations

import pytest

import pagedkv_edu  # noqa: F401  (selects the interpreter before triton is imported)
import triton
import triton.language as tl

from pagedkv_edu.exercises import ch4 as grader
from pagedkv_edu.exercises.solutions import ch4 as solution
from tests.test_exercises_ch3_4 import SOFTMAX_WRONG
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@triton.jit
def pad_copy_where(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.where(offs < n, offs, 0))
    tl.store(out_ptr + offs, tl.where(offs < n, x, 0.0))


@triton.jit
def pad_copy_no_mask(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


@triton.jit
def pad_copy_no_other(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n))


@triton.jit
def pad_copy_no_pid(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0))


@triton.jit
def pad_copy_masked_store(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0), mask=offs < n)


@triton.jit
def gather_clamped(src_ptr, idx_ptr, out_ptr, n, D: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    index = tl.load(idx_ptr + tl.where(rows < n, rows, 0))
    cols = tl.arange(0, D)
    tl.store(out_ptr + rows[:, None] * D + cols[None, :], tl.load(src_ptr + index[:, None] * D + cols[None, :]),
             mask=(rows < n)[:, None])


@triton.jit
def gather_unmasked_index(src_ptr, idx_ptr, out_ptr, n, D: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    index = tl.load(idx_ptr + rows)
    cols = tl.arange(0, D)
    tl.store(out_ptr + rows[:, None] * D + cols[None, :], tl.load(src_ptr + index[:, None] * D + cols[None, :]),
             mask=(rows < n)[:, None])


@triton.jit
def gather_unmasked_store(src_ptr, idx_ptr, out_ptr, n, D: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    index = tl.load(idx_ptr + rows, mask=rows < n, other=0)
    cols = tl.arange(0, D)
    tl.store(out_ptr + rows[:, None] * D + cols[None, :], tl.load(src_ptr + index[:, None] * D + cols[None, :]))


@triton.jit
def gather_no_index(src_ptr, idx_ptr, out_ptr, n, D: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, D)
    tl.store(out_ptr + rows[:, None] * D + cols[None, :], tl.load(src_ptr + rows[:, None] * D + cols[None, :],
             mask=(rows < n)[:, None], other=0.0), mask=(rows < n)[:, None])


@triton.jit
def stats_where(x_ptr, lengths_ptr, max_ptr, sum_ptr, stride_row, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    inside = offs < tl.load(lengths_ptr + r)
    x = tl.where(inside, tl.load(x_ptr + r * stride_row + offs, mask=inside, other=0.0), float("-inf"))
    m = tl.max(x, 0)
    tl.store(max_ptr + r, m)
    tl.store(sum_ptr + r, tl.sum(tl.where(inside, tl.exp(x - m), 0.0), 0))


@triton.jit
def stats_other_zero(x_ptr, lengths_ptr, max_ptr, sum_ptr, stride_row, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r * stride_row + offs, mask=offs < tl.load(lengths_ptr + r), other=0.0)
    m = tl.max(x, 0)
    tl.store(max_ptr + r, m)
    tl.store(sum_ptr + r, tl.sum(tl.exp(x - m), 0))


@triton.jit
def stats_no_max(x_ptr, lengths_ptr, max_ptr, sum_ptr, stride_row, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r * stride_row + offs, mask=offs < tl.load(lengths_ptr + r), other=float("-inf"))
    m = tl.max(x, 0)
    tl.store(max_ptr + r, m)
    tl.store(sum_ptr + r, tl.sum(tl.exp(x), 0) / tl.exp(m))


@triton.jit
def scores_sum_style(q_ptr, k_ptr, out_ptr, n, scale, G: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_g = tl.arange(0, G)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_g[:, None] * D + offs_d[None, :])
    k = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :], mask=(offs_n < n)[:, None], other=0.0)
    s = tl.sum(q[:, None, :] * k[None, :, :], 2) * scale
    tl.store(out_ptr + offs_g[:, None] * BLOCK_N + offs_n[None, :], tl.where((offs_n < n)[None, :], s, float("-inf")))


@triton.jit
def scores_no_padding(q_ptr, k_ptr, out_ptr, n, scale, G: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_g = tl.arange(0, G)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_g[:, None] * D + offs_d[None, :])
    k = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :], mask=(offs_n < n)[:, None], other=0.0)
    tl.store(out_ptr + offs_g[:, None] * BLOCK_N + offs_n[None, :], tl.dot(q, tl.trans(k), input_precision="ieee") * scale)


@triton.jit
def scores_no_scale(q_ptr, k_ptr, out_ptr, n, scale, G: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_g = tl.arange(0, G)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_g[:, None] * D + offs_d[None, :])
    k = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :], mask=(offs_n < n)[:, None], other=0.0)
    s = tl.dot(q, tl.trans(k), input_precision="ieee")
    tl.store(out_ptr + offs_g[:, None] * BLOCK_N + offs_n[None, :], tl.where((offs_n < n)[None, :], s, float("-inf")))


RIGHT = [(grader.check_pad_copy, solution.pad_copy), (grader.check_pad_copy, pad_copy_where),
         (grader.check_gather_rows, solution.gather_rows), (grader.check_gather_rows, gather_clamped),
         (grader.check_row_stats, solution.row_stats), (grader.check_row_stats, stats_where),
         (grader.check_scores, solution.scores), (grader.check_scores, scores_sum_style)]
WRONG = [(grader.check_pad_copy, pad_copy_no_mask, "other=0.0"), (grader.check_pad_copy, pad_copy_no_other, "other=0.0"),
         (grader.check_pad_copy, pad_copy_no_pid, "pid * BLOCK"), (grader.check_pad_copy, pad_copy_masked_store, "store"),
         (grader.check_gather_rows, gather_unmasked_index, "idx, entry 5 (past n = 5): mask the index load"),
         (grader.check_gather_rows, gather_unmasked_store, "mask the store"),
         (grader.check_gather_rows, gather_no_index, "expected src row"),
         (grader.check_row_stats, stats_other_zero, "other=-float('inf')"),
         (grader.check_row_stats, stats_no_max, "subtract the row's max"),
         (grader.check_scores, scores_no_padding, "-inf"), (grader.check_scores, scores_no_scale, "scale")]


@pytest.mark.parametrize("check, kernel", RIGHT, ids=lambda x: getattr(getattr(x, "fn", x), "__name__", ""))
def test_accepts(check, kernel, capsys):
    assert check(kernel), capsys.readouterr().out


@pytest.mark.parametrize("check, kernel, says", WRONG, ids=lambda x: getattr(getattr(x, "fn", x), "__name__", str(x)))
def test_rejects(check, kernel, says, capsys):
    ok = check(kernel)
    out = capsys.readouterr().out
    assert not ok and out.startswith("✗") and says in out, out


@triton.jit
def stub(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    raise NotImplementedError("your turn")


def test_stub_is_not_solved(capsys):
    assert not grader.check_pad_copy(stub)
    out = capsys.readouterr().out
    assert out.startswith("○") and "case" not in out


def test_try_helpers_return_inputs_and_outputs():
    r = grader.try_pad_copy(solution.pad_copy, n=5, block=4, programs=2)
    assert r["out"].tolist() == r["expected"].tolist()
    assert grader.try_gather_rows(solution.gather_rows)["out"].equal(grader.try_gather_rows(solution.gather_rows)["expected"])
    r = grader.try_row_stats(solution.row_stats)
    assert (r["row_max"] - r["expected_max"]).abs().max() < 1e-5
    r = grader.try_scores(solution.scores)
    assert r["out"].shape == r["expected"].shape


# --- in zh-TW ------------------------------------------------------------------------------------

@triton.jit
def pad_copy_raises(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    raise ValueError("a bug in the reader's kernel")


_PUZZLE_NAMES = {grader.check_pad_copy: "pad_copy（帶遮罩的載入）", grader.check_gather_rows: "gather_rows（經由索引收集）",
                 grader.check_row_stats: "row_stats（逐列歸約）", grader.check_scores: "scores（以 tl.dot 計算分數）"}
ZH_PUZZLES = [(check, kernel) for check, kernel, _ in WRONG] + [(grader.check_pad_copy, pad_copy_raises),
                                                                 (grader.check_pad_copy, stub)]


@pytest.mark.parametrize("check, kernel", ZH_PUZZLES, ids=lambda x: getattr(getattr(x, "fn", x), "__name__", str(x)))
@pytest.mark.usefixtures("zh_tw")
def test_puzzles_explain_in_zh_tw(check, kernel, capsys):
    assert check(kernel) is False
    out = capsys.readouterr().out
    name = _PUZZLE_NAMES[check]
    assert out.startswith((f"✗ {name}：未通過", f"○ {name}：尚未作答")), out
    assert untranslated(out) == [], out


def _softmax_raises(m, l, acc, s, v):
    return m, l, acc[:, 99]


def _softmax_stub(m, l, acc, s, v):
    raise NotImplementedError("your turn")


@pytest.mark.parametrize("name", [*SOFTMAX_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_online_softmax_explains_in_zh_tw(name, capsys, monkeypatch):
    # the first 8 hidden cases hold both dtypes, scores around 1,000 and ragged tiles: the lines of all 40, in less time
    monkeypatch.setattr(grader, "HIDDEN_SOFTMAX_CASES", grader.HIDDEN_SOFTMAX_CASES[:8])
    wrong = {**SOFTMAX_WRONG, "raises": _softmax_raises, "stub": _softmax_stub}[name]
    assert grader.check_online_softmax_update(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith(("✗ online_softmax_update（線上 softmax 更新）：未通過",
                           "○ online_softmax_update（線上 softmax 更新）：尚未作答")), out
    assert untranslated(out) == [], out


@pytest.mark.usefixtures("zh_tw")
def test_zh_tw_hints_name_the_fix(capsys):
    grader.check_row_stats(stats_other_zero)
    out = capsys.readouterr().out
    assert "提示：被遮罩的通道讀到 0，比這裡的每個值都大：以 other=-float('inf') 載入" in out, out
    assert "3 列，長度分別為 5、1 與 8，每個區塊 8 個值：" in out, out     # the case's name, made at import time
    grader.check_online_softmax_update(SOFTMAX_WRONG["_no_acc_rescale"])
    out = capsys.readouterr().out
    assert "第 2 個圖塊之後（共 4 個；float64，G = 3 個查詢頭" in out and "acc（累計輸出）：查詢頭 1：得到" in out, out
