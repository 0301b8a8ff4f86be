"""Chapter 4's whole-kernel grader accepts right kernels in other styles and rejects plausible wrong ones.

The mutants are one kernel (and one merge) with a variant named by a module global, which the
interpreter reads at every launch; each differs from the solution in one mistake a reader makes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import pagedkv_edu  # noqa: F401  (selects the interpreter before triton is imported)
import triton
import triton.language as tl

from pagedkv_edu.exercises import ch4_kernel as grader
from pagedkv_edu.exercises.solutions import ch4_kernel as solution
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

V = "none"   # the kernel variant under test
M = "none"   # the merge variant under test


@triton.jit
def kernel_mutant(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, part_ptr, lse_ptr,
                  qk_scale, num_splits, stride_qs, stride_qh, stride_cb, stride_ct, stride_ch, stride_tb,
                  stride_ps, stride_ph, stride_pk, stride_ls, stride_lh,
                  GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                  HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    if V == "off_by_one":
        seq_len = seq_len - 1
    chunk = tl.cdiv(tl.cdiv(seq_len, num_splits), TILE_N) * TILE_N
    if V == "unrounded_chunk":
        chunk = tl.cdiv(seq_len, num_splits)
    start = split * chunk
    end = tl.minimum(start + chunk, seq_len)
    if V == "whole_sequence":   # every split attends over everything: equal partials, equal weights
        start = split * 0
        end = seq_len
    if V == "split0_all":       # split 0 attends over everything, the others are empty
        start = split * 0
        end = tl.where(split == 0, seq_len, 0)
    offs_g = tl.arange(0, GROUP_PAD)
    mask_g = offs_g < GROUP
    heads = kv_head * GROUP + offs_g
    if V == "gqa_interleaved":
        heads = kv_head + offs_g * tl.num_programs(1)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    q_mask = mask_g[:, None] & mask_d[None, :]
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + offs_d[None, :], mask=q_mask, other=0.0)
    if V == "q_no_group_mask":   # the last KV head's padded rows read past the last query head, never stored
        q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + offs_d[None, :], mask=mask_d[None, :],
                    other=0.0)
    if V == "q_no_column_mask":  # columns past head_dim read q's padding: NaN scores, so l stays 0 and lse -inf
        q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + offs_d[None, :],
                    mask=mask_g[:, None] & (offs_d >= 0)[None, :], other=0.0)
    q = q.to(tl.float32)
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM_PAD], tl.float32)
    for tile_start in range(start, end, TILE_N):
        offs_n = tile_start + tl.arange(0, TILE_N)
        mask_n = offs_n < end
        block = tl.load(block_tables_ptr + seq * stride_tb + offs_n // BLOCK_SIZE, mask=mask_n, other=0)
        if V == "unmasked_table":
            block = tl.load(block_tables_ptr + seq * stride_tb + offs_n // BLOCK_SIZE)
        rows = block.to(tl.int64) * stride_cb + (offs_n % BLOCK_SIZE) * stride_ct + kv_head * stride_ch
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_cache_ptr + rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0).to(tl.float32)
        if V == "no_other":
            v = tl.load(v_cache_ptr + rows[:, None] + offs_d[None, :], mask=kv_mask).to(tl.float32)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
        qk = tl.where(mask_n[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        if V == "tile_local_max":
            m_new = tl.max(qk, 1)
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if V == "no_rescale":
            acc = acc + tl.dot(p, v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    safe_l = tl.where(l_i > 0, l_i, 1.0)
    if V == "empty_split_nan":
        safe_l = l_i
    result = acc / safe_l[:, None]
    if V == "unnormalised_part":
        result = acc
    part = part_ptr + seq * stride_ps + heads[:, None] * stride_ph + split * stride_pk + offs_d[None, :]
    store_mask = q_mask
    if V == "empty_stores_nothing":   # an empty split (l = 0) leaves part and lse as they were
        store_mask = q_mask & (l_i > 0)[:, None]
    if V == "part_no_group_mask":     # the last KV head's padded rows write past the last query head
        store_mask = mask_d[None, :] & (offs_g >= 0)[:, None]
    tl.store(part, result, mask=store_mask)
    lse = tl.where(l_i > 0, m_i + tl.log2(safe_l), float("-inf"))
    if V == "lse_natural_log":
        lse = tl.where(l_i > 0, m_i + tl.log(safe_l), float("-inf"))
    lse_mask = mask_g
    if V == "empty_stores_nothing":
        lse_mask = mask_g & (l_i > 0)
    tl.store(lse_ptr + seq * stride_ls + heads * stride_lh + split, lse, mask=lse_mask)


@triton.jit
def merge_mutant(part_ptr, lse_ptr, out_ptr, num_splits, stride_ps, stride_ph, stride_pk, stride_ls, stride_lh,
                 stride_os, stride_oh, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
                 SPLITS_PAD: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, SPLITS_PAD)
    mask_s = offs_s < num_splits
    if M == "all_splits":
        mask_s = offs_s < SPLITS_PAD
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    lse = tl.load(lse_ptr + seq * stride_ls + head * stride_lh + offs_s, mask=mask_s, other=float("-inf"))
    part = tl.load(part_ptr + seq * stride_ps + head * stride_ph + offs_s[:, None] * stride_pk + offs_d[None, :],
                   mask=mask_s[:, None] & mask_d[None, :], other=0.0)
    if M == "nan_tolerant":   # reads a split that stored nothing (NaN) as an empty one: hides a kernel that skips it
        lse = tl.where(lse == lse, lse, float("-inf"))
        part = tl.where(part == part, part, 0.0)
    weights = tl.exp2(lse - tl.max(lse, 0))
    if M == "natural_exp":
        weights = tl.exp(lse - tl.max(lse, 0))
    out = tl.sum(weights[:, None] * part, 0) / tl.sum(weights, 0)
    if M == "unnormalised":
        out = tl.sum(weights[:, None] * part, 0)
    if M == "first_split_only":
        out = tl.sum(tl.where((offs_s == 0)[:, None], part, 0.0), 0)
    tl.store(out_ptr + seq * stride_os + head * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty), mask=mask_d)


@triton.jit
def kernel_natural_sum_style(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, part_ptr, lse_ptr,
                             qk_scale, num_splits, stride_qs, stride_qh, stride_cb, stride_ct, stride_ch, stride_tb,
                             stride_ps, stride_ph, stride_pk, stride_ls, stride_lh,
                             GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                             HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr):
    """Correct, another style: natural exp inside (the lse it stores converted to base 2), no tl.dot, a loop
    over a tile count, the table index clamped instead of masked, an empty split's output chosen by a where."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    n = tl.load(seq_lens_ptr + seq)
    per_split = (n + num_splits - 1) // num_splits
    chunk = ((per_split + TILE_N - 1) // TILE_N) * TILE_N
    lo = split * chunk
    hi = tl.minimum(lo + chunk, n)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM_PAD)
    qmask = (g < GROUP)[:, None] & (d < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + seq * stride_qs + (kv_head * GROUP + g)[:, None] * stride_qh + d[None, :], mask=qmask,
                other=0.0).to(tl.float32) * (qk_scale * 0.6931471805599453)
    m = tl.zeros([GROUP_PAD], tl.float32) - float("inf")
    total = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM_PAD], tl.float32)
    for t in range(0, tl.cdiv(hi - lo, TILE_N)):
        pos = lo + t * TILE_N + tl.arange(0, TILE_N)
        inside = pos < hi
        index = tl.where(inside, pos // BLOCK_SIZE, 0)
        page = tl.load(block_tables_ptr + seq * stride_tb + index).to(tl.int64)
        row = page * stride_cb + (pos - (pos // BLOCK_SIZE) * BLOCK_SIZE) * stride_ct + kv_head * stride_ch
        both = inside[:, None] & (d < HEAD_DIM)[None, :]
        k = tl.load(k_cache_ptr + row[:, None] + d[None, :], mask=both, other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + row[:, None] + d[None, :], mask=both, other=0.0).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], 2)
        s = tl.where(inside[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        scale_old = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        total = total * scale_old + tl.sum(p, 1)
        acc = acc * scale_old[:, None] + tl.sum(p[:, :, None] * v[None, :, :], 1)
        m = m_new
    has = total > 0
    out = tl.where(has[:, None], acc / tl.where(has, total, 1.0)[:, None], 0.0)
    heads = kv_head * GROUP + g
    tl.store(part_ptr + seq * stride_ps + heads[:, None] * stride_ph + split * stride_pk + d[None, :], out, mask=qmask)
    lse_natural = m + tl.log(tl.where(has, total, 1.0))
    tl.store(lse_ptr + seq * stride_ls + heads * stride_lh + split,
             tl.where(has, lse_natural * 1.4426950408889634, float("-inf")), mask=g < GROUP)


@triton.jit
def merge_loop_style(part_ptr, lse_ptr, out_ptr, num_splits, stride_ps, stride_ph, stride_pk, stride_ls, stride_lh,
                     stride_os, stride_oh, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
                     SPLITS_PAD: tl.constexpr):
    """Correct, another style: one split at a time, scalar loads, no SPLITS_PAD tile."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    d = tl.arange(0, HEAD_DIM_PAD)
    base_l = lse_ptr + seq * stride_ls + head * stride_lh
    base_p = part_ptr + seq * stride_ps + head * stride_ph
    best = tl.load(base_l)
    for s in range(1, num_splits):
        best = tl.maximum(best, tl.load(base_l + s))
    num = tl.zeros([HEAD_DIM_PAD], tl.float32)
    den = 0.0
    for s in range(0, num_splits):
        w = tl.exp2(tl.load(base_l + s) - best)
        num += w * tl.load(base_p + s * stride_pk + d, mask=d < HEAD_DIM, other=0.0)
        den += w
    tl.store(out_ptr + seq * stride_os + head * stride_oh + d, (num / den).to(out_ptr.dtype.element_ty),
             mask=d < HEAD_DIM)


def _verdict(kernel, merge, capsys) -> tuple[bool, str]:
    ok = grader.check_paged_decode_kernel(kernel, merge)
    return ok, capsys.readouterr().out


@pytest.mark.parametrize("pair", [(solution.paged_decode_kernel, solution.merge_splits_kernel),
                                  (kernel_natural_sum_style, merge_loop_style)],
                         ids=["solution", "natural exp, no dot, clamped table index"])
def test_accepts(pair, capsys):
    ok, out = _verdict(*pair, capsys)
    assert ok, out
    assert "interpreter" in out


KERNEL_MUTANTS = {   # variant: what the failure must say
    "no_rescale": "expected",
    "tile_local_max": "running max",
    "no_other": "other=",
    "unmasked_table": "sequence 0's block-table row, entry 1,",   # the entry read, not the region's first
    "off_by_one": "last position",
    "gqa_interleaved": "KV head",
    "empty_split_nan": "divide by l only where l > 0",
    "unnormalised_part": "acc / l_i",
    "lse_natural_log": "base-2 log-sum-exp",
    "unrounded_chunk": "not whole tiles",
    # These three passed the grader that judged only the merged output (the fourth, an empty split that stores
    # nothing under a NaN-tolerant merge, has its own test below).
    "whole_sequence": "attended over positions 0..6 (the whole sequence), where it holds no position",
    "split0_all": "split 0 attended over positions 0..47 (the whole sequence), where it holds positions 0..15",
    "q_no_group_mask": "q[sequence 0, head 6 (past the last, 5), column 0]",
}


def _set(kernel_variant: str, merge_variant: str = "none") -> None:
    global V, M
    V, M = kernel_variant, merge_variant


@pytest.fixture
def variant():
    """Set the mutants' variants for one test, and put the solution's back whatever happens."""
    yield _set
    _set("none")


@pytest.mark.parametrize("name", KERNEL_MUTANTS)
def test_rejects_kernel_mutants(name, variant, capsys):
    variant(name)
    ok, out = _verdict(kernel_mutant, merge_mutant, capsys)
    assert not ok and KERNEL_MUTANTS[name] in out, out
    assert "query head" in out or "every split and the output are right" in out, out


def test_every_split_is_checked_before_the_merge(variant, capsys):
    """The wrong splits name the split and what it stored against the float64 reference of that split."""
    variant("whole_sequence")
    _, out = _verdict(kernel_mutant, merge_mutant, capsys)
    assert "split 1 (no position: chunks of 8, so split 1 would start at 8" in out, out
    assert "it stored part[..., column 0] =" in out and "(expected 0)" in out and "(expected -inf, base 2)" in out, out


def test_an_empty_split_that_stores_nothing_fails_even_under_a_nan_tolerant_merge(variant, capsys):
    variant("none", "nan_tolerant")   # the merge alone is right: it reads NaN as an empty split
    assert grader._grade(kernel_mutant, merge_mutant, grader.SHOWN_CASES[2]) == []
    variant("empty_stores_nothing", "nan_tolerant")
    ok, out = _verdict(kernel_mutant, merge_mutant, capsys)
    assert not ok and "split 1 (no position" in out and "stored nothing" in out and "12345" in out, out


def test_a_nan_from_an_unmasked_q_load_is_not_blamed_on_the_empty_split_rule(variant, capsys):
    """The old hint saw lse -inf beside a NaN part and blamed the empty-split rule; the split is not empty, and
    the re-run with q's padding zeroed confirms the cause."""
    variant("q_no_column_mask")
    ok, out = _verdict(kernel_mutant, merge_mutant, capsys)
    assert not ok and "no position" not in out and "l > 0" not in out, out
    assert "positions 0..15" in out and "read q[sequence 0, head 0, column 6 (past the last, 5)]" in out, out
    assert "that read is the cause" in out and "mask_d" in out, out


def test_a_store_of_part_without_the_group_mask_is_refused_before_it_writes(variant, capsys):
    """In the interpreter this store wrote past part and killed the process (a segmentation fault, no message)."""
    variant("part_no_group_mask")
    ok, out = _verdict(kernel_mutant, merge_mutant, capsys)
    assert not ok and "the store at line" in out and "test_exercises_ch4_kernel.py" in out, out
    assert "tl.store(part, result, mask=store_mask)" in out, out
    assert "part[sequence 0, head 6 (past the last, 5), split 0, column 0]" in out and "mask_g" in out, out
    assert "Nothing was written" in out, out


@pytest.mark.parametrize("name", ["all_splits", "natural_exp", "unnormalised", "first_split_only"])
def test_rejects_merge_mutants(name, variant, capsys):
    variant("none", name)
    ok, out = _verdict(kernel_mutant, merge_mutant, capsys)
    assert not ok and "the merge kernel is wrong" in out, out


def test_a_merge_reading_past_num_splits_is_named(variant, capsys):
    variant("none", "all_splits")
    _, out = _verdict(kernel_mutant, merge_mutant, capsys)
    assert "split 3 (past the last, 2)" in out and "offs_s < num_splits" in out, out


def test_mutant_machinery_is_the_solution_when_unchanged(capsys):
    ok, out = _verdict(kernel_mutant, merge_mutant, capsys)
    assert ok, out


@triton.jit
def stub(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, part_ptr, lse_ptr, qk_scale, num_splits,
         stride_qs, stride_qh, stride_cb, stride_ct, stride_ch, stride_tb, stride_ps, stride_ph, stride_pk,
         stride_ls, stride_lh, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
         HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr):
    seq = tl.program_id(0)
    raise NotImplementedError("your turn")


def test_stub_is_not_solved(capsys):
    ok, out = _verdict(stub, solution.merge_splits_kernel, capsys)
    assert not ok and out.startswith("○") and "not solved yet" in out and "case" not in out, out


def test_hidden_cases_cover_the_edges():
    from pagedkv_edu.viz.kernel_view import split_ranges

    hidden = grader.HIDDEN_CASES
    assert len(hidden) >= 20 and len({c.seed for c in hidden}) == len(hidden)
    assert hidden == grader.seeded(len(hidden), grader._HIDDEN_SEED, grader._draw_case), "seeded: the same every run"
    assert {c.block_size for c in hidden} & {3, 5, 6, 7, 12}, "block sizes that are not powers of two"
    edges = {"1": lambda c: 1, "B - 1": lambda c: c.block_size - 1, "B": lambda c: c.block_size,
             "B + 1": lambda c: c.block_size + 1, "TILE_N": lambda c: c.tile_n, "TILE_N + 1": lambda c: c.tile_n + 1}
    for name, edge in edges.items():
        assert any(edge(c) in c.seq_lens for c in hidden if edge(c) > 0), f"no hidden sequence of length {name}"
    assert {c.num_heads // c.num_kv_heads for c in hidden} == {1, 2, 3, 4}
    assert {c.dtype for c in hidden} == {torch.float32, torch.float16, torch.bfloat16}
    assert len({c.num_splits for c in hidden}) >= 4
    empty = [(c.name, n) for c in hidden for n in c.seq_lens
             if any(start == end for start, end in split_ranges(n, c.num_splits, c.tile_n))]
    assert empty, "more splits than tiles somewhere: an empty split"
    assert any(c.head_dim & (c.head_dim - 1) for c in hidden), "a head_dim that needs padding"


def test_try_returns_every_split_and_its_reference():
    r = grader.try_paged_decode_kernel(solution.paged_decode_kernel, solution.merge_splits_kernel, case=2)
    assert r["problems"] == [] and r["part"].shape == r["expected_part"].shape == (3, 8, 3, 8)
    assert torch.allclose(r["part"].double(), r["expected_part"], atol=2e-5)
    assert torch.equal(r["lse"][0, :, 1:].isneginf(), torch.ones(8, 2, dtype=torch.bool)), "two empty splits: -inf"
    with pytest.raises(NotImplementedError, match="stub"):
        grader.try_paged_decode_kernel(stub, solution.merge_splits_kernel)


def test_the_file_chapter_5_imports(tmp_path: Path, capsys):
    path = tmp_path / "paged_decode.py"
    kernel, merge, which = grader.reader_kernels(path)
    assert kernel is solution.paged_decode_kernel and "does not exist" in which
    source = Path(solution.__file__).read_text().replace("from ... import runtime", "import pagedkv_edu")
    path.write_text(source)
    assert "not passed" in grader.reader_kernels(path)[2]
    module = grader.load_kernels(path)
    assert grader.check_paged_decode_kernel(module.paged_decode_kernel, module.merge_splits_kernel, mark=path)
    kernel, merge, which = grader.reader_kernels(path)
    assert which.startswith("yours") and kernel is not solution.paged_decode_kernel
    path.write_text(source + "\n# edited\n")
    assert "changed since" in grader.reader_kernels(path)[2]


def test_tiles_visited_counts_each_split():
    assert grader.tiles_visited([7, 48, 61], 3, 8) == [1, 6, 8]
    assert grader.tiles_visited([33], 1, 16) == [3]
    assert grader.tiles_visited([1], 4, 8) == [1]


@pytest.mark.parametrize("splits", [1, 3], ids=["one split", "3 splits: the merge runs"])
@pytest.mark.parametrize("use_reader", [True, False], ids=["chapter-4 kernel", "book kernel"])
def test_decode_backend_runs_decode_steps_and_counts_tiles(use_reader, splits):
    from pagedkv_edu.attention import kernel_name, paged_attention
    from pagedkv_edu.attention.reference import paged_attention_float64
    from pagedkv_edu.model.paged_batch import random_paged_step

    pair = (solution.paged_decode_kernel, solution.merge_splits_kernel) if use_reader else (None, None)
    backend = grader.decode_backend(*pair, tile_n=8, num_splits=splits, name="mine")
    assert kernel_name([1, 1], backend) == "custom:mine"
    for seq_lens, query_lens in (([33, 9], [1, 1]), ([12, 9], [12, 1])):   # a decode step, then a prefill
        step = random_paged_step(seq_lens, query_lens, 5, 6, 2, 8, torch.float32, seed=4)
        args = step.args()
        got = paged_attention(*args, backend=backend)
        torch.testing.assert_close(got.double(), paged_attention_float64(*args), atol=2e-5, rtol=2e-5)
    # 33 positions in tiles of 8: 5 tiles in one program, or splits of 16 positions (2 + 2 + 1 tiles)
    assert backend.tiles.launches == 1 and backend.tiles.max_tiles_per_program == {1: 5, 3: 2}[splits]
    assert backend.tiles.tile_iterations == (5 + 2) * 2   # two KV heads
    assert backend.tiles.merge_launches == (splits > 1)


class _RaisesUnsupportedDtype:
    """A kernel whose launch fails as the interpreter does on ``block_mask & (slot >= 0)``."""

    def __getitem__(self, grid):  # noqa: ANN001, ANN204
        def launch(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            raise TypeError("unsupported dtype: the mask combines a block with a scalar test")
        return launch


def test_a_launch_error_is_reported_with_the_shared_hint(capsys):
    ok, out = _verdict(_RaisesUnsupportedDtype(), solution.merge_splits_kernel, capsys)
    assert not ok and "the launch raised TypeError: unsupported dtype" in out and "broadcast it first" in out, out


# --- in zh-TW: two mutants (each grading takes seconds in the interpreter), a launch that raises, the stub ---------

ZH = {   # (kernel variant, merge variant): a line the zh-TW failure must hold (None: the verdict is enough)
    ("whole_sequence", "none"): "提示：分割 1 的注意力涵蓋了位置 0..6（整條序列），但它應涵蓋的是空範圍：",
    ("none", "all_splits"): "每個分割的 part 與 lse 都正確（已先與 float64 比對過）：錯的是匯合核心。",
    ("raises", "none"): None,
    ("stub", "none"): None,
}


@pytest.mark.parametrize("kernel_variant, merge_variant", ZH, ids=lambda v: v)
@pytest.mark.usefixtures("zh_tw")
def test_the_kernel_grader_explains_in_zh_tw(kernel_variant, merge_variant, variant, capsys):
    kernel = {"raises": _RaisesUnsupportedDtype(), "stub": stub}.get(kernel_variant, kernel_mutant)
    variant(kernel_variant if kernel is kernel_mutant else "none", merge_variant)
    ok, out = _verdict(kernel, merge_mutant, capsys)
    name = "paged_decode_kernel + merge_splits_kernel（分頁解碼核心）"
    assert not ok and out.startswith((f"✗ {name}：未通過", f"○ {name}：尚未作答")), out
    assert untranslated(out) == [], out
    says = ZH[kernel_variant, merge_variant]
    assert says is None or says in out, out
