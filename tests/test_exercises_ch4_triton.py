"""Chapter 4's Triton graders accept right kernels in several styles and reject plausible wrong ones.

Every wrong kernel below is a mistake a reader makes: an off-by-one mask, a missing rescale,
a wrong stride, ``pos // B`` and ``pos % B`` swapped, a power-of-two-only trick, a hard-coded
answer. Each must fail its grader, and the grader must say where (without listing its cases).
The kernels run in the Triton interpreter; shapes are tiny so the whole file takes seconds.
"""

from __future__ import annotations

import torch
import pytest

import pagedkv_edu  # noqa: F401  (selects the interpreter before triton is imported)
import triton
import triton.language as tl

from pagedkv_edu.exercises import ch4_triton as grader
from pagedkv_edu.exercises.solutions import ch4_triton as solution
from pagedkv_edu.viz.kernel_view import split_ranges, store_svg, tile_reads_svg
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

# Wrong kernels overflow and divide by zero on purpose; numpy says so in the interpreter.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _verdict(check, fn, capsys) -> tuple[bool, str]:
    ok = check(fn)
    return ok, capsys.readouterr().out


# --- piece 1: store ------------------------------------------------------------------------------

@triton.jit
def store_loop_style(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr, stride_kt, stride_kh, stride_vt,
                     stride_vh, stride_cb, stride_ct, stride_ch, NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                     HEADS_PAD: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """Correct, another style: one head at a time, the padding test folded into a broadcast mask."""
    token = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + token)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    ok = (offs_d < HEAD_DIM) & (offs_d * 0 + slot >= 0)
    for h in tl.static_range(NUM_KV_HEADS):
        dst = (slot // BLOCK_SIZE) * stride_cb + (slot - (slot // BLOCK_SIZE) * BLOCK_SIZE) * stride_ct + h * stride_ch
        tl.store(k_cache_ptr + dst + offs_d, tl.load(k_ptr + token * stride_kt + h * stride_kh + offs_d, mask=ok), mask=ok)
        tl.store(v_cache_ptr + dst + offs_d, tl.load(v_ptr + token * stride_vt + h * stride_vh + offs_d, mask=ok), mask=ok)


def _store_mutant(variant: str):
    """Build a wrong store kernel; each variant differs from the solution in one plausible way."""

    @triton.jit
    def kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr, stride_kt, stride_kh, stride_vt, stride_vh,
               stride_cb, stride_ct, stride_ch, NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
               HEADS_PAD: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, V: tl.constexpr):
        token = tl.program_id(0)
        slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
        if V == "hard_coded":
            slot = token * 0 + token
        block = slot // BLOCK_SIZE
        offset = slot % BLOCK_SIZE
        if V == "pow2":
            block = slot >> 2
            offset = slot & (BLOCK_SIZE - 1)
        offs_h = tl.arange(0, HEADS_PAD)
        offs_d = tl.arange(0, HEAD_DIM_PAD)
        mask = (offs_h < NUM_KV_HEADS)[:, None] & (offs_d < HEAD_DIM)[None, :]
        if V == "off_by_one_dim":
            mask = (offs_h < NUM_KV_HEADS)[:, None] & (offs_d <= HEAD_DIM)[None, :]
        dst = block * stride_cb + offset * stride_ct + offs_h[:, None] * stride_ch + offs_d[None, :]
        if V == "contiguous_head":
            dst = block * stride_cb + offset * stride_ct + offs_h[:, None] * HEAD_DIM + offs_d[None, :]
        if V == "flat_slot":
            dst = slot * stride_ct + offs_h[:, None] * stride_ch + offs_d[None, :]
        k = tl.load(k_ptr + token * stride_kt + offs_h[:, None] * stride_kh + offs_d[None, :], mask=mask)
        v = tl.load(v_ptr + token * stride_vt + offs_h[:, None] * stride_vh + offs_d[None, :], mask=mask)
        if V == "swapped_kv":
            k, v = v, k
        write = slot >= 0
        if V == "no_skip":
            write = slot >= -1
        if V == "skips_slot_0":
            write = slot > 0
        if write:
            tl.store(k_cache_ptr + dst, k, mask=mask)
            tl.store(v_cache_ptr + dst, v, mask=mask)

    class Bound:
        """Pass the variant name as one more constexpr, so the grader's launch is unchanged."""

        def __getitem__(self, grid):
            return lambda *args, **kw: kernel[grid](*args, V=variant, **kw)

    return Bound()


STORE_MUTANTS = ("hard_coded", "pow2", "off_by_one_dim", "contiguous_head", "flat_slot", "swapped_kv", "no_skip",
                 "skips_slot_0")


@pytest.mark.parametrize("good", [solution.store_kv_kernel, store_loop_style], ids=["solution", "per-head loop"])
def test_store_accepts(good, capsys):
    ok, out = _verdict(grader.check_store_kv, good, capsys)
    assert ok, out


@pytest.mark.parametrize("variant", STORE_MUTANTS)
def test_store_rejects(variant, capsys):
    ok, out = _verdict(grader.check_store_kv, _store_mutant(variant), capsys)
    assert not ok and "✗ store_kv_kernel（槽位映射寫入）: failed" in out
    assert "later cases not run" in out and out.count("hidden case") <= 1, out  # the first failing case only


def test_store_names_the_power_of_two_trick(capsys):
    _, out = _verdict(grader.check_store_kv, _store_mutant("pow2"), capsys)
    assert "not a power of two" in out


@pytest.mark.parametrize("variant", ["no_skip", "off_by_one_dim", "swapped_kv"])
def test_store_hints_only_their_own_cause(variant, capsys):
    _, out = _verdict(grader.check_store_kv, _store_mutant(variant), capsys)
    assert "not a power of two" not in out, out


# --- piece 2: tile slots -------------------------------------------------------------------------

@triton.jit
def slots_divmod_style(table_row_ptr, offs_n, mask_n, BLOCK_SIZE: tl.constexpr):
    """Correct, another style: the offset as pos - block_index * B, the table load with a where."""
    index = offs_n // BLOCK_SIZE
    block = tl.load(table_row_ptr + tl.where(mask_n, index, 0))
    return block * BLOCK_SIZE + (offs_n - index * BLOCK_SIZE)


@triton.jit
def slots_swapped(table_row_ptr, offs_n, mask_n, BLOCK_SIZE: tl.constexpr):
    return tl.load(table_row_ptr + offs_n % BLOCK_SIZE, mask=mask_n, other=0) * BLOCK_SIZE + offs_n // BLOCK_SIZE


@triton.jit
def slots_pow2(table_row_ptr, offs_n, mask_n, BLOCK_SIZE: tl.constexpr):
    return tl.load(table_row_ptr + (offs_n >> 2), mask=mask_n, other=0) * BLOCK_SIZE + (offs_n & (BLOCK_SIZE - 1))


@triton.jit
def slots_next_entry(table_row_ptr, offs_n, mask_n, BLOCK_SIZE: tl.constexpr):
    return tl.load(table_row_ptr + offs_n // BLOCK_SIZE + 1, mask=mask_n, other=0) * BLOCK_SIZE + offs_n % BLOCK_SIZE


@triton.jit
def slots_hard_b16(table_row_ptr, offs_n, mask_n, BLOCK_SIZE: tl.constexpr):
    return tl.load(table_row_ptr + offs_n // 16, mask=mask_n, other=0) * 16 + offs_n % 16


@triton.jit
def slots_no_times_b(table_row_ptr, offs_n, mask_n, BLOCK_SIZE: tl.constexpr):
    return tl.load(table_row_ptr + offs_n // BLOCK_SIZE, mask=mask_n, other=0) + offs_n % BLOCK_SIZE


@triton.jit
def slots_hard_coded(table_row_ptr, offs_n, mask_n, BLOCK_SIZE: tl.constexpr):
    return offs_n


@triton.jit
def slots_off_by_one(table_row_ptr, offs_n, mask_n, BLOCK_SIZE: tl.constexpr):
    pos = offs_n + 1
    return tl.load(table_row_ptr + pos // BLOCK_SIZE, mask=mask_n, other=0) * BLOCK_SIZE + pos % BLOCK_SIZE


@triton.jit
def slots_no_mask(table_row_ptr, offs_n, mask_n, BLOCK_SIZE: tl.constexpr):
    """Right slots for every position inside the sequence; reads the table past its last block."""
    return tl.load(table_row_ptr + offs_n // BLOCK_SIZE) * BLOCK_SIZE + offs_n % BLOCK_SIZE


def test_tile_slots_rejects_an_unmasked_table_load(capsys):
    ok, out = _verdict(grader.check_tile_slots, slots_no_mask, capsys)
    assert not ok and "the slots are right, but a load" in out and "mask=mask_n" in out, out
    # Sequence 0 of that case holds 5 tokens in blocks of 5: tile 0 reads entry 1, the first past its one block,
    # and the message counts from the row's start (it once said "entry 0", counting from the padding's start).
    assert "sequence 0's block-table row, entry 1," in out, out


@pytest.mark.parametrize("good", [solution.tile_slots, slots_divmod_style], ids=["solution", "divmod style"])
def test_tile_slots_accepts(good, capsys):
    ok, out = _verdict(grader.check_tile_slots, good, capsys)
    assert ok, out


@pytest.mark.parametrize("bad", [slots_swapped, slots_pow2, slots_next_entry, slots_hard_b16, slots_no_times_b,
                                 slots_hard_coded, slots_off_by_one], ids=lambda f: f.fn.__name__)
def test_tile_slots_rejects(bad, capsys):
    ok, out = _verdict(grader.check_tile_slots, bad, capsys)
    assert not ok and "program (sequence" in out and "expected slot" in out, out


def test_tile_slots_hints(capsys):
    _, out = _verdict(grader.check_tile_slots, slots_swapped, capsys)
    assert "swapped" in out
    _, out = _verdict(grader.check_tile_slots, slots_hard_coded, capsys)
    assert "the table was skipped" in out


# --- piece 3: load a tile ------------------------------------------------------------------------

@triton.jit
def load_where_style(cache_ptr, slots, mask_n, kv_head, offs_d, mask_d, stride_block, stride_token, stride_head,
                     BLOCK_SIZE: tl.constexpr):
    """Correct, another style: clamp masked slots to 0, load with the column mask, then zero the rows."""
    safe = tl.where(mask_n, slots, 0)
    rows = (safe // BLOCK_SIZE) * stride_block + (safe % BLOCK_SIZE) * stride_token + kv_head * stride_head
    x = tl.load(cache_ptr + rows[:, None] + offs_d[None, :], mask=mask_n[:, None] & mask_d[None, :], other=0.0)
    return tl.where(mask_n[:, None] & mask_d[None, :], x, 0.0)


LOAD_V = "none"  # the wrong variant load_mutant runs; the interpreter reads it at each call


@triton.jit
def load_mutant(cache_ptr, slots, mask_n, kv_head, offs_d, mask_d, stride_block, stride_token, stride_head,
                BLOCK_SIZE: tl.constexpr):
    block = slots // BLOCK_SIZE
    offset = slots % BLOCK_SIZE
    if LOAD_V == "pow2":
        offset = slots & (BLOCK_SIZE - 1)
    rows = block * stride_block + offset * stride_token + kv_head * stride_head
    if LOAD_V == "flat_slot":
        rows = slots * stride_token + kv_head * stride_head
    if LOAD_V == "head_stride":
        rows = block * stride_block + offset * stride_token + kv_head * stride_token
    if LOAD_V == "no_head":
        rows = block * stride_block + offset * stride_token
    mask = mask_n[:, None] & mask_d[None, :]
    if LOAD_V == "no_row_mask":
        mask = (offs_n_all(mask_n))[:, None] & mask_d[None, :]
    if LOAD_V == "no_col_mask":
        mask = mask_n[:, None] & (offs_d >= 0)[None, :]
    x = tl.load(cache_ptr + rows[:, None] + offs_d[None, :], mask=mask, other=0.0)
    if LOAD_V == "no_other":   # the interpreter alone fills masked lanes with 0; a GPU leaves them undefined
        x = tl.load(cache_ptr + rows[:, None] + offs_d[None, :], mask=mask)
    if LOAD_V == "hard_coded":
        x = x * 0.0
    return x


def _load_mutant(variant: str):
    """The load piece with one plausible mistake, ``variant``."""
    global LOAD_V
    LOAD_V = variant
    return load_mutant


@triton.jit
def offs_n_all(mask_n):
    """Every row: what a kernel that forgets the row mask loads."""
    return mask_n | (mask_n == 0)


LOAD_MUTANTS = ("pow2", "flat_slot", "head_stride", "no_head", "no_row_mask", "no_col_mask", "no_other", "hard_coded")


@pytest.mark.parametrize("good", [solution.load_tile, load_where_style], ids=["solution", "where style"])
def test_load_tile_accepts(good, capsys):
    ok, out = _verdict(grader.check_load_tile, good, capsys)
    assert ok, out


@pytest.mark.parametrize("variant", LOAD_MUTANTS)
def test_load_tile_rejects(variant, capsys):
    ok, out = _verdict(grader.check_load_tile, _load_mutant(variant), capsys)
    assert not ok and "program (sequence" in out and "dtype" in out, out


def test_load_tile_explains_masked_rows(capsys):
    _, out = _verdict(grader.check_load_tile, _load_mutant("no_row_mask"), capsys)
    assert "past the sequence (masked)" in out


# --- piece 4: online-softmax tile update ---------------------------------------------------------

@triton.jit
def update_natural_exp_sum_style(m_i, l_i, acc, qk, v):
    """Correct, another style: natural exp of base-2 logits times ln 2, the weighted sum without tl.dot."""
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp((m_i - m_new) * 0.6931471805599453)
    p = tl.exp((qk - m_new[:, None]) * 0.6931471805599453)
    return m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], 1)


UPDATE_V = "none"  # the wrong variant update_mutant runs; the interpreter reads it at each call


@triton.jit
def update_mutant(m_i, l_i, acc, qk, v):
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    if UPDATE_V == "forgets_old_max":
        m_new = tl.max(qk, 1)
    alpha = tl.exp2(m_i - m_new)
    if UPDATE_V == "alpha_sign":
        alpha = tl.exp2(m_new - m_i)
    p = tl.exp2(qk - m_new[:, None])
    if UPDATE_V == "natural_exp":
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(qk - m_new[:, None])
    if UPDATE_V == "no_max_subtraction":
        p = tl.exp2(qk)
        alpha = alpha * 0.0 + 1.0
    l_new = l_i * alpha + tl.sum(p, 1)
    if UPDATE_V == "l_not_rescaled":
        l_new = l_i + tl.sum(p, 1)
    acc_new = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
    if UPDATE_V == "acc_not_rescaled":
        acc_new = acc + tl.dot(p, v, input_precision="ieee")
    if UPDATE_V == "tile_local_max":   # right arithmetic, but qk - (-inf) is NaN on a tile of only padding
        m_tile = tl.max(qk, 1)
        p = tl.exp2(qk - m_tile[:, None])
        beta = tl.exp2(m_tile - m_new)
        l_new = l_i * alpha + tl.sum(p, 1) * beta
        acc_new = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee") * beta[:, None]
    if UPDATE_V == "hard_coded":
        return m_i, l_i, acc
    return m_new, l_new, acc_new


def _update_mutant(variant: str):
    """The update piece with one plausible mistake, ``variant``."""
    global UPDATE_V
    UPDATE_V = variant
    return update_mutant


UPDATE_MUTANTS = ("forgets_old_max", "alpha_sign", "natural_exp", "no_max_subtraction", "l_not_rescaled",
                  "acc_not_rescaled", "tile_local_max", "hard_coded")


@pytest.mark.parametrize("good", [solution.softmax_tile_update, update_natural_exp_sum_style],
                         ids=["solution", "exp with ln2, no dot"])
def test_update_accepts(good, capsys):
    ok, out = _verdict(grader.check_softmax_tile_update, good, capsys)
    assert ok, out


@pytest.mark.parametrize("variant", UPDATE_MUTANTS)
def test_update_rejects(variant, capsys):
    ok, out = _verdict(grader.check_softmax_tile_update, _update_mutant(variant), capsys)
    assert not ok and "float32" in out and "relative error" in out, out


# --- piece 5: split-K merge ----------------------------------------------------------------------

@triton.jit
def merge_loop_style(part_ptr, lse_ptr, num_splits, stride_split, offs_d, mask_d, SPLITS_PAD: tl.constexpr):
    """Correct, another style: an online merge, one split at a time, with scalar loads."""
    m = tl.load(lse_ptr)
    total = tl.exp2(m - m)
    out = tl.load(part_ptr + offs_d, mask=mask_d, other=0.0)
    for s in tl.range(1, num_splits):
        lse = tl.load(lse_ptr + s)
        m_new = tl.maximum(m, lse)
        scale = tl.exp2(m - m_new)
        w = tl.exp2(lse - m_new)
        out = out * scale + w * tl.load(part_ptr + s * stride_split + offs_d, mask=mask_d, other=0.0)
        total = total * scale + w
        m = m_new
    return out / total


MERGE_V = "none"  # the wrong variant merge_mutant runs; the interpreter reads it at each call


@triton.jit
def merge_mutant(part_ptr, lse_ptr, num_splits, stride_split, offs_d, mask_d, SPLITS_PAD: tl.constexpr):
    offs_s = tl.arange(0, SPLITS_PAD)
    mask_s = offs_s < num_splits
    if MERGE_V == "off_by_one":
        mask_s = offs_s <= num_splits
    lse = tl.load(lse_ptr + offs_s, mask=mask_s, other=float("-inf"))
    part = tl.load(part_ptr + offs_s[:, None] * stride_split + offs_d[None, :],
                   mask=mask_s[:, None] & mask_d[None, :], other=0.0)
    if MERGE_V == "transposed_strides":
        part = tl.load(part_ptr + offs_s[:, None] + offs_d[None, :] * stride_split,
                       mask=mask_s[:, None] & mask_d[None, :], other=0.0)
    w = tl.exp2(lse - tl.max(lse, 0))
    if MERGE_V == "no_max":
        w = tl.exp2(lse)
    if MERGE_V == "natural_exp":
        w = tl.exp(lse - tl.max(lse, 0))
    if MERGE_V == "plain_mean":
        w = tl.where(mask_s, 1.0, 0.0)
    out = tl.sum(w[:, None] * part, 0) / tl.sum(w, 0)
    if MERGE_V == "divide_by_count":
        out = tl.sum(w[:, None] * part, 0) / num_splits
    if MERGE_V == "hard_coded":
        out = tl.load(part_ptr + offs_d, mask=mask_d, other=0.0)
    return out


def _merge_mutant(variant: str):
    """The merge piece with one plausible mistake, ``variant``."""
    global MERGE_V
    MERGE_V = variant
    return merge_mutant


MERGE_MUTANTS = ("off_by_one", "transposed_strides", "no_max", "natural_exp", "plain_mean", "divide_by_count", "hard_coded")


@pytest.mark.parametrize("good", [solution.merge_splits, merge_loop_style], ids=["solution", "online loop"])
def test_merge_accepts(good, capsys):
    ok, out = _verdict(grader.check_merge_splits, good, capsys)
    assert ok, out


@pytest.mark.parametrize("variant", MERGE_MUTANTS)
def test_merge_rejects(variant, capsys):
    ok, out = _verdict(grader.check_merge_splits, _merge_mutant(variant), capsys)
    assert not ok and "program" in out and "expected" in out, out


# --- stubs, pictures -------------------------------------------------------------------

@triton.jit
def stub(table_row_ptr, offs_n, mask_n, BLOCK_SIZE: tl.constexpr):
    raise NotImplementedError("your turn")


def test_unsolved_stub_is_neutral(capsys):
    ok, out = _verdict(grader.check_tile_slots, stub, capsys)
    assert not ok
    assert out.strip() == f"○ tile_slots（經由區塊表查槽位）: {grader.NOT_SOLVED}"
    assert "Traceback" not in out and "✗" not in out


def test_pictures_are_deterministic_and_mark_masked_positions():
    a = tile_reads_svg([[7, 1, 3]], [9], 4, 8, 4)
    assert a.svg == tile_reads_svg([[7, 1, 3]], [9], 4, 8, 4).svg
    assert a.svg.count('class="position masked"') == 3  # 12 positions in 3 tiles of 4, 9 real
    assert 'data-slot="28"' in a.svg and 'data-slot="12"' in a.svg  # position 0 -> block 7, position 8 -> block 3
    s = store_svg([28, -1, 5], 4, 8)
    assert s.svg.count('class="token skipped"') == 1
    assert split_ranges(10, 3, 2) == [(0, 4), (4, 8), (8, 10)]
    with pytest.raises(ValueError, match="block_size"):
        tile_reads_svg([[0]], [1], 0, 1, 4)


def test_tile_slots_names_a_foreign_block_size(capsys):
    _, out = _verdict(grader.check_tile_slots, slots_hard_b16, capsys)
    assert "block size 16" in out and "BLOCK_SIZE argument" in out, out


def test_try_helpers_return_one_case():
    r = grader.try_store_kv(solution.store_kv_kernel)
    assert r["problems"] == [] and torch.equal(r["k_cache"].nan_to_num(7), r["expected_k_cache"].nan_to_num(7))
    r = grader.try_tile_slots(solution.tile_slots)
    assert r["problems"] == [] and [int(x) for x in r["slots"][0, :9]] == r["expected"][0]
    assert grader.try_load_tile(solution.load_tile)["problems"] == []
    r = grader.try_softmax_tile_update(solution.softmax_tile_update, 1)
    assert r["problems"] == [] and len(r["tiles"]) == 3
    r = grader.try_merge_splits(solution.merge_splits)
    assert r["problems"] == [] and torch.allclose(r["out"], r["expected"], atol=1e-5)
    with pytest.raises(NotImplementedError, match="stub"):
        grader.try_tile_slots(stub)


# --- the watch: stores and loads outside the tensors a kernel was given ------------------------------------

@triton.jit
def _store_row(out_ptr, offset, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offset + offs, offs.to(tl.float32))


@triton.jit
def _load_row(x_ptr, out_ptr, offset, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(x_ptr + offset + offs))


def _guarded_rows(name: str = "out") -> grader.Guarded:
    """A [2, 4] tensor inside a [2, 6] NaN buffer: columns 4 and 5 of each row are its padding."""
    buffer = torch.full((2, 6), float("nan"))
    return grader.Guarded(name, buffer, buffer[:, :4], ("row", "column"), writable=True,
                          advice={"column": "mask the columns"})


def test_a_store_into_a_tensors_padding_is_refused_before_it_writes():
    out = _guarded_rows()
    error = grader._launch(lambda: _store_row[(1,)](out.view, 0, N=8), guarded=(out,))
    assert error is not None and error.startswith("the store at line") and "test_exercises_ch4_triton.py" in error
    assert "`tl.store(out_ptr + offset + offs, offs.to(tl.float32))`" in error, error
    assert "out[row 0, column 4 (past the last, 3)]" in error and "mask the columns" in error, error
    assert bool(torch.isnan(out.buffer).all()), "nothing may be written, not even the lanes inside the tensor"


def test_a_store_far_outside_every_tensor_is_refused_instead_of_crashing():
    """An unwatched interpreter would write 40 MB past the tensor: into the process's memory, or a segfault."""
    out = _guarded_rows()
    error = grader._launch(lambda: _store_row[(1,)](out.view, 10_000_000, N=4), guarded=(out,))
    assert error is not None and "would write memory outside out" in error and "Nothing was written" in error, error


def test_a_load_outside_every_tensor_is_refused_and_padding_reads_are_named():
    x, out = _guarded_rows("x"), _guarded_rows()
    x.view.copy_(torch.arange(8.0).view(2, 4))
    error = grader._launch(lambda: _load_row[(1,)](x.view, out.view, 10_000_000, N=4), guarded=(x, out))
    assert error is not None and "the load at line" in error and "outside every tensor" in error, error
    reads: list[grader.Read] = []
    assert grader._launch(lambda: _load_row[(1,)](x.view, out.view, 2, N=4), reads, guarded=(x, out)) is None
    assert [str(r) for r in reads] == ["x[row 0, column 4 (past the last, 3)]"]
    assert reads[0].region is x and reads[0].advice == "mask the columns"


# --- zh-TW: the same failures, in Traditional Chinese ----------------------------------------------

@triton.jit
def slots_raises(table_row_ptr, offs_n, mask_n, BLOCK_SIZE: tl.constexpr):
    raise ValueError("the reader's own bug")


# Two wrong pieces per grader (they run in the interpreter), a raising one and the stub; built when the test runs,
# since the load, update and merge mutants are one kernel switched by a global.
ZH_WRONG = {
    "store pow2": (grader.check_store_kv, "store_kv_kernel（槽位映射寫入）", lambda: _store_mutant("pow2")),
    "store no_skip": (grader.check_store_kv, "store_kv_kernel（槽位映射寫入）", lambda: _store_mutant("no_skip")),
    "slots swapped": (grader.check_tile_slots, "tile_slots（經由區塊表查槽位）", lambda: slots_swapped),
    "slots no_mask": (grader.check_tile_slots, "tile_slots（經由區塊表查槽位）", lambda: slots_no_mask),
    "slots raises": (grader.check_tile_slots, "tile_slots（經由區塊表查槽位）", lambda: slots_raises),
    "load no_row_mask": (grader.check_load_tile, "load_tile（帶遮罩載入圖塊）", lambda: _load_mutant("no_row_mask")),
    "load flat_slot": (grader.check_load_tile, "load_tile（帶遮罩載入圖塊）", lambda: _load_mutant("flat_slot")),
    "update forgets_old_max": (grader.check_softmax_tile_update, "softmax_tile_update（線上 softmax 更新）",
                               lambda: _update_mutant("forgets_old_max")),
    "update acc_not_rescaled": (grader.check_softmax_tile_update, "softmax_tile_update（線上 softmax 更新）",
                                lambda: _update_mutant("acc_not_rescaled")),
    "merge off_by_one": (grader.check_merge_splits, "merge_splits（KV 分割匯合）", lambda: _merge_mutant("off_by_one")),
    "merge plain_mean": (grader.check_merge_splits, "merge_splits（KV 分割匯合）", lambda: _merge_mutant("plain_mean")),
}


@pytest.mark.parametrize("key", ZH_WRONG)
def test_wrong_pieces_fail_in_zh_tw(key, zh_tw, capsys):
    check, name, build = ZH_WRONG[key]
    ok, out = _verdict(check, build(), capsys)
    assert not ok and f"✗ {name}：未通過" in out, out
    assert untranslated(out) == [], out


def test_the_stub_is_not_solved_in_zh_tw(zh_tw, capsys):
    ok, out = _verdict(grader.check_tile_slots, stub, capsys)
    assert not ok and out.strip() == f"○ tile_slots（經由區塊表查槽位）：{grader.NOT_SOLVED}", out
    assert "尚未作答（它引發 NotImplementedError）" in out and untranslated(out) == [], out
    with pytest.raises(NotImplementedError, match="空白函式"):
        grader.try_tile_slots(stub)


def test_zh_tw_hints_name_the_mistake(zh_tw, capsys):
    _, out = _verdict(grader.check_tile_slots, slots_hard_b16, capsys)
    assert "提示：那是區塊大小為 16 時的槽位，但這個案例的區塊大小是 4：請用 BLOCK_SIZE 引數" in out, out
    _, out = _verdict(grader.check_tile_slots, slots_no_mask, capsys)
    assert "槽位都正確，但有一次載入沒有遮罩它的通道" in out and "（序列 0 的區塊表列，項目 1）" in out, out


def test_the_watch_speaks_zh_tw(zh_tw):
    out = _guarded_rows()
    error = grader._launch(lambda: _store_row[(1,)](out.view, 10_000_000, N=4), guarded=(out,))
    assert error is not None and "的儲存會寫到 out 之外的記憶體" in error and "這次什麼都沒有寫入" in error, error
    assert "test_exercises_ch4_triton.py 第" in error and untranslated(error) == [], error
