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
    start = split * chunk
    end = tl.minimum(start + chunk, seq_len)
    offs_g = tl.arange(0, GROUP_PAD)
    mask_g = offs_g < GROUP
    heads = kv_head * GROUP + offs_g
    if V == "gqa_interleaved":
        heads = kv_head + offs_g * tl.num_programs(1)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask_d = offs_d < HEAD_DIM
    q_mask = mask_g[:, None] & mask_d[None, :]
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + offs_d[None, :], mask=q_mask, other=0.0)
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
    tl.store(part, result, mask=q_mask)
    lse = tl.where(l_i > 0, m_i + tl.log2(safe_l), float("-inf"))
    if V == "lse_natural_log":
        lse = tl.where(l_i > 0, m_i + tl.log(safe_l), float("-inf"))
    tl.store(lse_ptr + seq * stride_ls + heads * stride_lh + split, lse, mask=mask_g)


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
    """Correct, another style: natural exp and a natural-log lse (its merge agrees), no tl.dot, a loop over
    a tile count, the table index clamped instead of masked, head-dim columns loaded with a where."""
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
    tl.store(lse_ptr + seq * stride_ls + heads * stride_lh + split,
             tl.where(has, m + tl.log(tl.where(has, total, 1.0)), float("-inf")), mask=g < GROUP)


@triton.jit
def merge_natural_loop_style(part_ptr, lse_ptr, out_ptr, num_splits, stride_ps, stride_ph, stride_pk, stride_ls,
                             stride_lh, stride_os, stride_oh, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
                             SPLITS_PAD: tl.constexpr):
    """Correct, another style: natural-log lse (as its kernel wrote them), one split at a time."""
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
        w = tl.exp(tl.load(base_l + s) - best)
        num += w * tl.load(base_p + s * stride_pk + d, mask=d < HEAD_DIM, other=0.0)
        den += w
    tl.store(out_ptr + seq * stride_os + head * stride_oh + d, (num / den).to(out_ptr.dtype.element_ty),
             mask=d < HEAD_DIM)


def _verdict(kernel, merge, capsys) -> tuple[bool, str]:
    ok = grader.check_paged_decode_kernel(kernel, merge)
    return ok, capsys.readouterr().out


@pytest.mark.parametrize("pair", [(solution.paged_decode_kernel, solution.merge_splits_kernel),
                                  (kernel_natural_sum_style, merge_natural_loop_style)],
                         ids=["solution", "natural exp, no dot, clamped table index"])
def test_accepts(pair, capsys):
    ok, out = _verdict(*pair, capsys)
    assert ok, out
    assert "interpreter" in out


KERNEL_MUTANTS = {   # variant: what the failure must say
    "no_rescale": "expected",
    "tile_local_max": "running max",
    "no_other": "other=",
    "unmasked_table": "mask",
    "off_by_one": "last position",
    "gqa_interleaved": "KV head",
    "empty_split_nan": "must store output 0 and lse -inf",
    "unnormalised_part": "expected",
    "lse_natural_log": "stage 1 is wrong",
}


@pytest.mark.parametrize("variant", KERNEL_MUTANTS)
def test_rejects_kernel_mutants(variant, capsys):
    global V, M
    V, M = variant, "none"
    ok, out = _verdict(kernel_mutant, merge_mutant, capsys)
    V = "none"
    assert not ok and KERNEL_MUTANTS[variant] in out, out
    assert "query head" in out or "the output is right" in out, out


@pytest.mark.parametrize("variant", ["all_splits", "natural_exp", "unnormalised", "first_split_only"])
def test_rejects_merge_mutants(variant, capsys):
    global V, M
    V, M = "none", variant
    ok, out = _verdict(kernel_mutant, merge_mutant, capsys)
    M = "none"
    assert not ok and "The merge kernel is wrong" in out, out


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
    cases = list(grader.SHOWN_CASES) + grader.HIDDEN_CASES
    assert {c.block_size for c in cases} & {3, 5, 6, 12}
    assert any(c.num_splits > 1 for c in cases) and any(c.num_heads // c.num_kv_heads >= 3 for c in cases)
    assert any(n == 1 for c in cases for n in c.seq_lens)
    assert {c.dtype for c in cases} >= {torch.float32, torch.float16}


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


@pytest.mark.parametrize("use_reader", [True, False], ids=["chapter-4 kernel", "book kernel"])
def test_decode_backend_runs_decode_steps_and_counts_tiles(use_reader):
    from pagedkv_edu.attention import kernel_name, paged_attention
    from pagedkv_edu.attention.reference import paged_attention_float64
    from pagedkv_edu.model.paged_batch import random_paged_step

    pair = (solution.paged_decode_kernel, solution.merge_splits_kernel) if use_reader else (None, None)
    backend = grader.decode_backend(*pair, tile_n=8, name="mine")
    assert kernel_name([1, 1], backend) == "custom:mine"
    for seq_lens, query_lens in (([33, 9], [1, 1]), ([12, 9], [12, 1])):   # a decode step, then a prefill
        step = random_paged_step(seq_lens, query_lens, 5, 6, 2, 8, torch.float32, seed=4)
        args = step.args()
        got = paged_attention(*args, backend=backend)
        torch.testing.assert_close(got.double(), paged_attention_float64(*args), atol=2e-5, rtol=2e-5)
    assert backend.tiles.launches == 1 and backend.tiles.max_tiles_per_program == 5   # 33 positions, tiles of 8
    assert backend.tiles.tile_iterations == (5 + 2) * 2   # two KV heads


class _RaisesUnsupportedDtype:
    """A kernel whose launch fails as the interpreter does on ``block_mask & (slot >= 0)``."""

    def __getitem__(self, grid):  # noqa: ANN001, ANN204
        def launch(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            raise TypeError("unsupported dtype: the mask combines a block with a scalar test")
        return launch


def test_a_launch_error_is_reported_with_the_shared_hint(capsys):
    ok, out = _verdict(_RaisesUnsupportedDtype(), solution.merge_splits_kernel, capsys)
    assert not ok and "the launch raised TypeError: unsupported dtype" in out and "broadcast it first" in out, out
