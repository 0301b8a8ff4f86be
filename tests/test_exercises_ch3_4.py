"""Chapter 3's gather grader and chapter 4's PyTorch online-softmax grader accept right answers in any style, reject the usual wrong ones, and say why."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from pagedkv_edu.attention import gather_kv as package_gather_kv
from pagedkv_edu.attention import paged_attention, paged_attention_float64
from pagedkv_edu.engine.generate import generate
from pagedkv_edu.engine.guards import PartError
from pagedkv_edu.exercises import my_engine
from pagedkv_edu.exercises.ch3 import GATHER_CASES, HIDDEN_GATHER_CASES, case_cache, check_gather_kv, gather_attention
from pagedkv_edu.exercises.ch4 import (
    HIDDEN_SOFTMAX_CASES,
    SOFTMAX_CASES,
    check_online_softmax_update,
    initial_state,
    softmax_case_data,
)
from pagedkv_edu.exercises.solutions import ch3 as gather_solution
from pagedkv_edu.exercises.solutions.ch3 import gather_kv
from pagedkv_edu.exercises.solutions.ch4 import online_softmax_update
from pagedkv_edu.model.loading import load_model
from pagedkv_edu.model.paged_batch import random_paged_step
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)


# --- the solutions are right, on the hidden cases too ------------------------------------------------
def test_gather_solution_matches_the_package() -> None:
    for case in GATHER_CASES + tuple(HIDDEN_GATHER_CASES):
        if case.seq_len == 0:
            continue   # the package's gather asks for at least one token
        cache = case_cache(case)
        assert torch.equal(gather_kv(cache, case.block_table, case.seq_len),
                           package_gather_kv(cache, case.block_table, case.seq_len))


def test_online_softmax_solution_equals_softmax() -> None:
    for case in SOFTMAX_CASES + tuple(c for c in HIDDEN_SOFTMAX_CASES if c.dtype == torch.float64):
        scores, values = softmax_case_data(case)
        m, l, acc = initial_state(case.group, case.head_dim)
        for s, v in zip(scores, values):
            m, l, acc = online_softmax_update(m, l, acc, s, v)
        expected = torch.softmax(torch.cat(scores, dim=1), dim=1) @ torch.cat(values)
        torch.testing.assert_close(acc / l[:, None], expected, rtol=1e-12, atol=1e-12)


def test_hidden_cases_cover_the_edges() -> None:
    assert {3, 5, 6, 12} <= {c.block_size for c in HIDDEN_GATHER_CASES}
    assert {0, 1} <= {c.seq_len for c in HIDDEN_GATHER_CASES}
    assert any(c.seq_len > 0 and c.seq_len % c.block_size == 0 for c in HIDDEN_GATHER_CASES)
    assert {torch.float32, torch.float16, torch.bfloat16} <= {c.dtype for c in HIDDEN_GATHER_CASES}
    assert {1, 3, 5} <= {t for c in HIDDEN_SOFTMAX_CASES for t in c.tiles}
    assert torch.float32 in {c.dtype for c in HIDDEN_SOFTMAX_CASES}


# --- gather ----------------------------------------------------------------------------------------
def _ignores_table(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    return cache.reshape(-1, *cache.shape[2:])[:n]


def _whole_blocks(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    used = -(-n // cache.shape[1])
    return torch.cat([cache[b] for b in table[:used]] or [cache[:0, 0]])


def _swapped_div_mod(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    b = cache.shape[1]
    slots = [table[(p % b) % len(table)] * b + p // b for p in range(n)]
    return cache.reshape(-1, *cache.shape[2:])[slots]


def _sorted_table(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    return gather_kv(cache, sorted(t for t in table if t >= 0), n)


def _float32_copy(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    """Right rows, wrong dtype: torch.zeros without dtype= gives float32."""
    b = cache.shape[1]
    out = torch.zeros(n, *cache.shape[2:])
    for p in range(n):
        out[p] = cache[table[p // b], p % b]
    return out


def _stack_rows(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    """Right for every length but 0, where torch.stack has nothing to stack."""
    b = cache.shape[1]
    return torch.stack([cache[table[p // b], p % b] for p in range(n)])


def _gather_bit_trick(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    b = cache.shape[1]
    s = b.bit_length() - 1
    slots = [(table[p // b] << s) + (p & (b - 1)) for p in range(n)]
    return cache.reshape(-1, *cache.shape[2:])[slots]


def _gather_global_b(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    b = 16   # the notebook's B, not this cache's block size
    slots = [table[p // b] * b + p % b for p in range(n)]
    return cache.reshape(-1, *cache.shape[2:])[slots]


_GATHER_KEY = {(c.block_table, c.seq_len, c.block_size): gather_kv(case_cache(c), c.block_table, c.seq_len)
               for c in GATHER_CASES}


def _gather_answer_key(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    hit = _GATHER_KEY.get((tuple(table), n, cache.shape[1]))
    return hit.clone() if hit is not None else _ignores_table(cache, table, n)


GATHER_WRONG = {f.__name__: f for f in (_ignores_table, _whole_blocks, _swapped_div_mod, _sorted_table,
                                        _float32_copy, _stack_rows, _gather_bit_trick, _gather_global_b,
                                        _gather_answer_key)}


def _gather_loop(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    b = cache.shape[1]
    out = torch.empty(n, *cache.shape[2:], dtype=cache.dtype)
    for p in range(n):
        out[p] = cache[table[p // b], p % b]
    return out


def _gather_blocks(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    b = cache.shape[1]
    pieces = [cache[table[i], : min(b, n - i * b)] for i in range(-(-n // b))]
    return torch.cat(pieces) if pieces else cache.new_empty(0, *cache.shape[2:])


def _gather_numpy_slots(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    b = cache.shape[1]
    pos = np.arange(n)
    slots = np.asarray(table, dtype=np.int64)[pos // b] * b + pos % b
    return cache.flatten(0, 1).index_select(0, torch.from_numpy(slots))


def _gather_torch(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    b = cache.shape[1]
    pos = torch.arange(n)
    return cache[torch.tensor(table, dtype=torch.long)[pos // b], pos % b]


GATHER_RIGHT = {"reference": gather_kv, "loop": _gather_loop, "blocks": _gather_blocks, "numpy": _gather_numpy_slots,
                "torch": _gather_torch}


@pytest.mark.parametrize("name", GATHER_RIGHT)
def test_gather_checker_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_gather_kv(GATHER_RIGHT[name]) is True
    assert "✓ gather_kv（經由區塊表收集 K/V）: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", GATHER_WRONG)
def test_gather_checker_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_gather_kv(GATHER_WRONG[name]) is False
    assert capsys.readouterr().out.startswith("✗ gather_kv（經由區塊表收集 K/V）: failed")


def test_gather_checker_says_where_a_wrong_row_came_from(capsys: pytest.CaptureFixture[str]) -> None:
    check_gather_kv(_ignores_table)
    out = capsys.readouterr().out
    # Seed 004, position 0: expected slot 28 (block 7), got slot 0 (block 0, not this sequence's).
    assert "position 0: expected slot 28 (block 7, offset 0), got slot 0 (block 0, offset 0, " \
           "a block this sequence does not own)" in out
    check_gather_kv(_whole_blocks)
    assert "expected shape (9, 2, 3), got (12, 2, 3) (whole blocks" in capsys.readouterr().out


def test_gather_checker_names_the_real_cause(capsys: pytest.CaptureFixture[str]) -> None:
    check_gather_kv(_float32_copy)
    out = capsys.readouterr().out
    assert "dtype: the cache is torch.float64 but the result is torch.float32" in out
    assert "expected slot 28 (block 7, offset 0), got slot 28" not in out
    check_gather_kv(_stack_rows)
    out = capsys.readouterr().out
    assert "0 tokens" in out and "stack expects a non-empty TensorList" in out and "a tensor with 0 rows" in out
    check_gather_kv(_gather_bit_trick)
    assert "only when B is a power of two" in capsys.readouterr().out
    check_gather_kv(_gather_global_b)
    out = capsys.readouterr().out
    assert "the block size here is 4" in out


def test_gather_checker_stub(capsys: pytest.CaptureFixture[str]) -> None:
    def stub(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
        raise NotImplementedError("your turn")

    assert check_gather_kv(stub) is False
    assert capsys.readouterr().out.startswith("○ gather_kv（經由區塊表收集 K/V）: not solved yet")


def _gather_stub(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    raise NotImplementedError


@pytest.mark.parametrize("name", [*GATHER_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_gather_checker_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = {**GATHER_WRONG, "raises": lambda cache, table, n: cache[99], "stub": _gather_stub}[name]
    assert check_gather_kv(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith(("✗ gather_kv（經由區塊表收集 K/V）：未通過", "○ gather_kv（經由區塊表收集 K/V）：尚未作答")), out
    assert untranslated(out) == []


@pytest.mark.usefixtures("zh_tw")
def test_gather_says_where_a_wrong_row_came_from_in_zh_tw(capsys: pytest.CaptureFixture[str]) -> None:
    check_gather_kv(_ignores_table)
    assert "位置 0：應為槽位 28（區塊 7，偏移 0），卻得到槽位 0（區塊 0，偏移 0，這個區塊不屬於這條序列）" \
        in capsys.readouterr().out
    cache = case_cache(GATHER_CASES[0])
    attend = gather_attention(_whole_blocks)
    with pytest.raises(PartError) as error:    # the engine's stop, in the reader's language too
        attend(torch.zeros(2, 2, 3, dtype=torch.float64), cache, cache.clone(), torch.tensor([[7, 1, 3]]),
               torch.tensor([9]), torch.tensor([0, 2]), 1.0)
    assert str(error.value) == ("你的 gather_kv（my_engine/gather.py）：這一步的序列 0，它的 K：gather_kv(k_cache, [7, 1, 3], 9)："
                                "回傳結果的形狀為 (12, 2, 3)，引擎需要 (9, 2, 3)（你取了整個區塊：最後一個區塊尾端的空位不屬於這條序列）")



# --- the saved file ----------------------------------------------------------------------------------
GATHER_STUB = '''import torch


def gather_kv(cache: torch.Tensor, block_table: list[int], seq_len: int) -> torch.Tensor:
    raise NotImplementedError("your turn")
'''


def test_a_saved_gather_that_passes_is_marked_passed_and_the_engine_gets_it(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gather.py"
    shutil.copy(gather_solution.__file__, path)
    assert check_gather_kv(path) is True
    out = capsys.readouterr().out
    assert "✓ gather_kv（經由區塊表收集 K/V）: passed" in out and f"{path} is marked passed" in out
    assert my_engine.why_not_passed(path, "3") is None
    parts = my_engine.load_parts(tmp_path, quiet=True)
    assert parts.card["gather"].yours and parts.attention.__name__ == "your_gather"


@pytest.mark.parametrize("text, message", [
    (None, "does not exist: run the %%writefile cell above"),
    ("import torch\nB = 1 / 0\n", "importing {path} raised ZeroDivisionError: division by zero, at `B = 1 / 0`"),
    ("def gather(cache, block_table, seq_len):\n    return cache\n",
     "{path} defines no function gather_kv(cache, block_table, seq_len)"),
    ("from pagedkv_edu.attention import gather_kv\n", "{path} imports the shipped gather_kv instead of defining"),
], ids=["missing", "import error", "no gather_kv", "the shipped one"])
def test_a_saved_gather_the_grader_cannot_grade_is_named(text: str | None, message: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gather.py"
    if text is not None:
        path.write_text(text)
    assert check_gather_kv(path) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ gather_kv（經由區塊表收集 K/V）: failed") and message.format(path=path) in out, out
    assert not path.with_name("gather.py.passed").exists()


def test_the_saved_stub_is_not_solved_and_not_marked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gather.py"
    path.write_text(GATHER_STUB)
    assert check_gather_kv(str(path)) is False
    assert capsys.readouterr().out.startswith("○ gather_kv（經由區塊表收集 K/V）: not solved yet")
    assert not path.with_name("gather.py.passed").exists()


# --- the gather as the decoder's attention -----------------------------------------------------------
TOL = {torch.float32: 2e-5, torch.float16: 3e-3, torch.bfloat16: 2.5e-2}
# (seq_lens, query_lens, block_size, num_heads, num_kv_heads, head_dim, dtype): each step mixes whole prompts,
# prompts after a cached prefix (ending mid-block too), decode tokens and sequences with nothing new
RANDOM_STEPS = [
    ([9, 1, 16, 23, 5], [9, 1, 1, 7, 0], 5, 6, 2, 8, torch.float32),
    ([17, 3, 30, 12], [17, 3, 1, 5], 3, 9, 3, 16, torch.float16),
    ([40, 7, 2], [12, 1, 2], 7, 4, 4, 8, torch.bfloat16),
    ([33, 1, 12, 48], [1, 1, 1, 1], 16, 8, 1, 16, torch.float32),
    ([29, 6], [13, 6], 6, 12, 4, 24, torch.float32),
]


@pytest.mark.parametrize("step_shape", RANDOM_STEPS, ids=[f"B{s[2]}-{str(s[6])[6:]}" for s in RANDOM_STEPS])
def test_the_solution_as_attention_equals_the_float64_reference(step_shape: tuple) -> None:
    *shape, dtype = step_shape
    step = random_paged_step(*shape, dtype, device="cpu", seed=shape[2], table_width=12)   # tables padded with -1
    assert step.batch.k_cache.isnan().any(), "the cache's unused slots are poisoned"
    out = paged_attention(*step.args(), backend=gather_attention(gather_kv))
    assert out.dtype == dtype and out.shape == step.q.shape and bool(out.isfinite().all())
    torch.testing.assert_close(out.double(), paged_attention_float64(*step.args()), atol=TOL[dtype], rtol=TOL[dtype])


def _off_by_one_block(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    """Logical block p // B - 1: table[-1] for the first block, silently."""
    b = cache.shape[1]
    return cache.reshape(-1, *cache.shape[2:])[[table[p // b - 1] * b + p % b for p in range(n)]]


def _float64_copy(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    return gather_kv(cache, table, n).double()


def _table_as_tensor(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    """Right for a tensor table; the engine hands a list, as the grader does."""
    b = cache.shape[1]
    pos = torch.arange(n)
    return cache.reshape(-1, *cache.shape[2:])[table.long()[pos // b] * b + pos % b]


def _clears_what_it_read(cache: torch.Tensor, table: Sequence[int], n: int) -> torch.Tensor:
    """Right rows, then zeroes them in the cache (as if reading consumed them)."""
    b = cache.shape[1]
    slots = [table[p // b] * b + p % b for p in range(n)]
    rows = cache.reshape(-1, *cache.shape[2:])[slots]
    cache.view(-1, *cache.shape[2:])[slots] = 0
    return rows


ENGINE_WRONG = {
    "off-by-one block": (_off_by_one_block, r"position 0 \(table entry 0: block 0, slot 0\) holds slot 4 \(block 1, "
                                            r"offset 0\); 6 of 6 positions wrong$"),
    "float64": (_float64_copy, r"returned dtype torch.float64, the engine needs torch.float32$"),
    "whole blocks": (_whole_blocks, r"returned shape \(8, 2, 16\), the engine needs \(6, 2, 16\) \(whole blocks"),
    "raises": (_table_as_tensor, r"raised AttributeError: 'list' object has no attribute 'long', at `return cache"),
    "writes": (_clears_what_it_read, r"wrote into the cache: a gather only reads it"),
}


@pytest.fixture(scope="module")
def tiny() -> torch.nn.Module:
    return load_model("tiny-random").model


@pytest.mark.parametrize("name", ENGINE_WRONG)
def test_a_wrong_gather_stops_generate_naming_the_part_the_call_and_the_value(name: str, tiny) -> None:
    fn, message = ENGINE_WRONG[name]
    with pytest.raises(PartError, match=r"^your gather_kv \(my_engine/gather.py\): the step's sequence 0, its K: "
                                        r"gather_kv\(k_cache, \[\d+, \d+\], 6\)[ :].*" + message):
        generate(tiny, [[5, 6, 7, 8, 9, 10], [11, 12, 13]], 3, block_size=4, backend=gather_attention(fn))


def test_right_gathers_decode_as_the_torch_path_does(tiny) -> None:
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12, 13], list(range(20, 37))]
    shipped = generate(tiny, prompts, 5, block_size=3).tokens
    for name, fn in GATHER_RIGHT.items():
        result = generate(tiny, prompts, 5, block_size=3, backend=gather_attention(fn, name))
        assert result.tokens == shipped and result.attention == {"prefill": f"custom:{name}", "decode": f"custom:{name}"}


# --- online softmax --------------------------------------------------------------------------------
def _no_acc_rescale(m, l, acc, s, v):
    m_new = torch.maximum(m, s.max(1).values)
    p = torch.exp(s - m_new[:, None])
    return m_new, l * torch.exp(m - m_new) + p.sum(1), acc + p @ v


def _no_sum_rescale(m, l, acc, s, v):
    m_new = torch.maximum(m, s.max(1).values)
    alpha = torch.exp(m - m_new)
    p = torch.exp(s - m_new[:, None])
    return m_new, l + p.sum(1), acc * alpha[:, None] + p @ v


def _no_running_max(m, l, acc, s, v):
    """Mathematically a softmax (sums of exp(score)), numerically not: overflows near 1,000."""
    p = torch.exp(s)
    return torch.zeros_like(m), l + p.sum(1), acc + p @ v


def _old_max_in_exp(m, l, acc, s, v):
    m_new = torch.maximum(m, s.max(1).values)
    alpha = torch.exp(m - m_new)
    p = torch.exp(s - torch.where(torch.isinf(m), m_new, m)[:, None])
    return m_new, l * alpha + p.sum(1), acc * alpha[:, None] + p @ v


def _tile_local_max(m, l, acc, s, v):
    """Right arithmetic, except on a tile of only padding: exp(-inf - -inf) is NaN."""
    m_tile = s.max(1).values
    p = torch.exp(s - m_tile[:, None])
    m_new = torch.maximum(m, m_tile)
    a, b = torch.exp(m - m_new), torch.exp(m_tile - m_new)
    return m_new, l * a + p.sum(1) * b, acc * a[:, None] + (p @ v) * b[:, None]


def _float32_state(m, l, acc, s, v):
    return online_softmax_update(m.float(), l.float(), acc.float(), s.float(), v.float())


def _float32_inside(m, l, acc, s, v):
    """Returns the right dtype, computed in float32: errors of about 1e-7."""
    return tuple(x.to(m.dtype) for x in _float32_state(m, l, acc, s, v))


def _pairwise_max(m, l, acc, s, v):
    """A tree reduction that assumes a power-of-two tile: the odd column out is dropped."""
    x = s
    while x.shape[1] > 1:
        w = x.shape[1] // 2 * 2
        x = torch.maximum(x[:, 0:w:2], x[:, 1:w:2])
    m_new = torch.maximum(m, x[:, 0])
    alpha = torch.exp(m - m_new)
    p = torch.exp(s - m_new[:, None])
    return m_new, l * alpha + p.sum(1), acc * alpha[:, None] + p @ v


def _softmax_answer_key_table() -> dict[bytes, tuple[torch.Tensor, ...]]:
    table = {}
    for case in SOFTMAX_CASES:
        scores, values = softmax_case_data(case)
        state = initial_state(case.group, case.head_dim)
        for s, v in zip(scores, values):
            state = online_softmax_update(*state, s, v)
            table[s.numpy().tobytes()] = state
    return table


_SOFTMAX_KEY = _softmax_answer_key_table()


def _softmax_answer_key(m, l, acc, s, v):
    hit = _SOFTMAX_KEY.get(s.numpy().tobytes())
    return tuple(x.clone() for x in hit) if hit is not None else _no_acc_rescale(m, l, acc, s, v)


SOFTMAX_WRONG = {f.__name__: f for f in (_no_acc_rescale, _no_sum_rescale, _no_running_max, _old_max_in_exp, _tile_local_max,
                                         _float32_state, _float32_inside, _pairwise_max, _softmax_answer_key)}


def _softmax_numpy(m, l, acc, s, v):
    m_, l_, acc_, s_, v_ = (x.numpy() for x in (m, l, acc, s, v))
    m_new = np.maximum(m_, s_.max(axis=1))
    alpha = np.exp(m_ - m_new)
    p = np.exp(s_ - m_new[:, None])
    return tuple(torch.from_numpy(np.asarray(x)) for x in (m_new, l_ * alpha + p.sum(1), acc_ * alpha[:, None] + p @ v_))


def _softmax_per_head_loop(m, l, acc, s, v):
    m_out, l_out, acc_out = m.clone(), l.clone(), acc.clone()
    for g in range(s.shape[0]):
        new = max(float(m[g]), float(s[g].max()))
        alpha = torch.exp(m[g] - new)
        p = torch.exp(s[g] - new)
        m_out[g], l_out[g] = new, l[g] * alpha + p.sum()
        acc_out[g] = acc[g] * alpha + p @ v
    return m_out, l_out, acc_out


def _softmax_logsumexp(m, l, acc, s, v):
    m_new = torch.cat([m[:, None], s], dim=1).amax(dim=1)
    alpha = torch.exp(m - m_new)
    p = torch.exp(s - m_new[:, None])
    return m_new, l * alpha + torch.exp(torch.logsumexp(s - m_new[:, None], dim=1)), \
        torch.addmm(acc * alpha[:, None], p, v)


SOFTMAX_RIGHT = {"reference": online_softmax_update, "numpy": _softmax_numpy, "per-head loop": _softmax_per_head_loop,
                 "logsumexp": _softmax_logsumexp}


@pytest.mark.parametrize("name", SOFTMAX_RIGHT)
def test_softmax_checker_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_online_softmax_update(SOFTMAX_RIGHT[name]) is True
    assert "✓ online_softmax_update（線上 softmax 更新）: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", SOFTMAX_WRONG)
def test_softmax_checker_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_online_softmax_update(SOFTMAX_WRONG[name]) is False
    assert capsys.readouterr().out.startswith("✗ online_softmax_update（線上 softmax 更新）: failed")


def test_softmax_checker_names_tile_quantity_dtype_and_error(capsys: pytest.CaptureFixture[str]) -> None:
    check_online_softmax_update(_no_acc_rescale)
    out = capsys.readouterr().out
    assert "random scores, four tiles of 8:" in out and "after tile 2 of 4 (float64" in out
    assert "acc (running output): head 1: expected" in out and "m (running max)" not in out
    assert "max abs error" in out and "max rel error" in out
    check_online_softmax_update(_no_running_max)
    assert "m (running max): expected" in capsys.readouterr().out
    check_online_softmax_update(_float32_state)
    assert "dtype: m, l and acc are torch.float32, but the state and the inputs are torch.float64" in \
        capsys.readouterr().out
    check_online_softmax_update(_float32_inside)
    out = capsys.readouterr().out
    assert "(float64 allows about 1e-09): an error of float32 size" in out
    check_online_softmax_update(_pairwise_max)
    assert "hidden case" in capsys.readouterr().out   # the shown tiles are all powers of two wide


def test_softmax_checker_stub(capsys: pytest.CaptureFixture[str]) -> None:
    def stub(m, l, acc, s, v):
        raise NotImplementedError("your turn")

    assert check_online_softmax_update(stub) is False
    out = capsys.readouterr().out
    assert out.startswith("○ online_softmax_update（線上 softmax 更新）: not solved yet") and "tile" not in out
