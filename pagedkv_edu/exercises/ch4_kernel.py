"""Grader for chapter 4's last exercise: the whole paged decode kernel and its split-K merge.

The reader's two kernels are saved to :data:`READER_FILE`; :func:`check_paged_decode_kernel`
grades them against a float64 reference (chapter 4's "How the graders work" lists the cases and
the poison), :func:`reader_kernels` is how chapter 5 finds them (the saved file if it passed,
else the shipped solution), and :func:`decode_backend` runs them as the decoder's attention.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .. import runtime
from ..attention.triton_decode import LOG2E
from .ch4_triton import PagedCache, _dot_floor, _first_mismatch, _launch, _np2, past_the_table, table_padding
from .grading import grade_in_order, seeded
from .my_engine import load_file, mark_passed, why_not_passed
from .solutions import ch4_kernel as solution

READER_FILE = Path("my_kernels") / "paged_decode.py"
"""Where chapter 4 saves the reader's kernels, relative to the notebooks (git ignores it)."""

TOLERANCE = {torch.float32: 2e-5, torch.float16: 3e-3, torch.bfloat16: 2.5e-2}


# --- launching the reader's two kernels -------------------------------------------------------------

def launch_paged_decode(kernel: Any, merge: Any, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float, *, num_splits: int = 1,
                        tile_n: int = 16, out: torch.Tensor | None = None, merge_one_split: bool = True,
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch ``kernel`` (stage 1) then ``merge`` (stage 2); return ``(out, part, lse)``.

    ``part`` and ``lse`` are float32 and filled with NaN before the launch, as ``out`` is when
    it is not given. ``q`` is ``[num_seqs, num_heads, head_dim]``; the cache is NHD with any
    strides but a contiguous head_dim (K and V share strides). With one split, stage 1's
    output is the answer: ``merge_one_split=False`` copies it instead of launching the merge.
    """
    num_seqs, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    floor = _dot_floor()
    part = torch.full((num_seqs, num_heads, num_splits, head_dim), float("nan"), dtype=torch.float32,
                      device=q.device)
    lse = torch.full((num_seqs, num_heads, num_splits), float("nan"), dtype=torch.float32, device=q.device)
    out = torch.full_like(q, float("nan")) if out is None else out
    kernel[(num_seqs, num_kv_heads, num_splits)](
        q, k_cache, v_cache, block_tables, seq_lens, part, lse, scale * LOG2E, num_splits,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        GROUP=group, GROUP_PAD=_np2(group, floor), HEAD_DIM=head_dim, HEAD_DIM_PAD=_np2(head_dim, floor),
        BLOCK_SIZE=block_size, TILE_N=max(tile_n, floor))
    if num_splits == 1 and not merge_one_split:
        return out.copy_(part[:, :, 0]), part, lse
    merge[(num_seqs, num_heads)](
        part, lse, out, num_splits, part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        out.stride(0), out.stride(1), HEAD_DIM=head_dim, HEAD_DIM_PAD=_np2(head_dim), SPLITS_PAD=_np2(num_splits))
    return out, part, lse


def tiles_visited(seq_lens: list[int], num_splits: int, tile_n: int) -> list[int]:
    """Loop iterations of one KV head's programs, per sequence: the tiles of each split, added up."""
    counts = []
    for n in seq_lens:
        chunk = -(-(-(-n // num_splits)) // tile_n) * tile_n
        counts.append(sum(-(-max(0, min(chunk, n - s * chunk)) // tile_n) for s in range(num_splits)))
    return counts


# --- the cases ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelCase:
    name: str
    block_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    seq_lens: tuple[int, ...]
    num_splits: int = 1
    tile_n: int = 8
    dtype: torch.dtype = torch.float32
    seed: int = 0
    drop: bool = False   # sequence 0's first tile scores about 300 (base 2) above the rest


SHOWN_CASES: tuple[KernelCase, ...] = (
    KernelCase("block size 5, GQA group 3 (6 query heads, 2 KV heads), lengths 1, 5, 6 and 37, tiles of 8",
               5, 6, 2, 8, (1, 5, 6, 37)),
    KernelCase("scores that fall by about 300 (base 2) after the first tile: exp2 overflows without the running max",
               4, 2, 1, 8, (30,), drop=True, seed=1),
    KernelCase("split-K: 3 splits, block size 6, GQA group 4, lengths 7 (two splits empty), 48 and 61",
               6, 8, 2, 8, (7, 48, 61), num_splits=3, seed=2),
    KernelCase("block size 12, head_dim 6 (padded to 8), 2 splits, float16, lengths 24 and 25",
               12, 4, 2, 6, (24, 25), num_splits=2, dtype=torch.float16, seed=3),
)


_HIDDEN_SEED = 44


def _draw_case(rng: random.Random, i: int) -> KernelCase:
    b = rng.choice((3, 5, 6, 12, 1, 16))
    tile = rng.choice((4, 8, 16))
    kv, group = rng.choice(((1, 1), (1, 3), (2, 2), (2, 4), (3, 3)))
    lens = tuple(rng.choice((1, b - 1 or 1, b, b + 1, tile, tile + 1, rng.randint(2, 60)))
                 for _ in range(rng.randint(1, 3)))
    dtype = (torch.float32, torch.float16, torch.bfloat16, torch.float32)[i % 4]
    return KernelCase(
        f"hidden case {i + 1} (seeded random): block size {b}, tiles of {tile}, {kv * group} query heads on {kv} "
        f"KV head(s), {len(lens)} sequence(s), {str(dtype).removeprefix('torch.')}",
        b, kv * group, kv, rng.choice((4, 5, 8)), lens, rng.randint(1, 4), tile, dtype, _HIDDEN_SEED * 100 + i)


HIDDEN_CASES = seeded(4, _HIDDEN_SEED, _draw_case)


@dataclass
class Built:
    """A case's inputs: a strided paged cache (NaN where no token lives), tables padded with a guard block."""

    q: torch.Tensor
    cache: PagedCache
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    used: list[int]
    guard: int
    scale: float


def build(case: KernelCase) -> Built:
    """The inputs of ``case``, seeded: the same tensors every time."""
    device = runtime.device()
    gen = torch.Generator().manual_seed(case.seed)
    rng = random.Random(case.seed)
    b, kv, d = case.block_size, case.num_kv_heads, case.head_dim
    used = [-(-n // b) for n in case.seq_lens]
    num_blocks = sum(used) + 2
    guard = num_blocks - 1            # a block no sequence owns: it stays NaN
    cache = PagedCache.empty(num_blocks, b, kv, d, case.dtype, device)
    free = rng.sample(range(num_blocks - 1), num_blocks - 1)
    width = max(used) + 2
    tables = []
    for need in used:
        tables.append(free[:need] + [guard] * (width - need))
        free = free[need:]
    q_buffer = torch.full((len(case.seq_lens), case.num_heads + 1, d + 2), float("nan"), dtype=case.dtype)
    q = q_buffer[:, :case.num_heads, :d]
    q.copy_(torch.randn(q.shape, generator=gen))
    scale = d ** -0.5
    for s, (table, n) in enumerate(zip(tables, case.seq_lens)):
        for pos in range(n):
            blk, off = table[pos // b], pos % b
            k = torch.randn(kv, d, generator=gen)
            if case.drop and s == 0 and pos < case.tile_n:   # these keys point along their query heads
                group = case.num_heads // kv
                qh = q[s].float().view(kv, group, d)[:, 0]
                k = qh * (300.0 / (LOG2E * scale * (qh * qh).sum(-1, keepdim=True))) + 0.01 * k
            cache.k[blk, off] = k.to(case.dtype)
            cache.v[blk, off] = torch.randn(kv, d, generator=gen).to(case.dtype)
    table_tensor = torch.tensor(tables, dtype=torch.int32, device=device)
    return Built(q.to(device), cache, table_tensor, torch.tensor(case.seq_lens, dtype=torch.int32, device=device),
                 used, guard, scale)


def reference(built: Built, *, head_of: Callable[[int, int, int], int] | None = None,
              context: Callable[[int], int] | None = None) -> torch.Tensor:
    """Decode attention in float64 through the block tables (``head_of``/``context`` model mistakes)."""
    q, k_cache, v_cache = built.q.cpu().double(), built.cache.k.cpu().double(), built.cache.v.cpu().double()
    num_seqs, num_heads, d = q.shape
    kv = k_cache.shape[2]
    b = k_cache.shape[1]
    group = num_heads // kv
    out = torch.zeros(num_seqs, num_heads, d, dtype=torch.float64)
    for s in range(num_seqs):
        n = int(built.seq_lens[s]) if context is None else context(int(built.seq_lens[s]))
        table = built.block_tables[s].cpu().long()
        pos = torch.arange(n)
        blocks, offs = table[pos // b], pos % b
        for h in range(num_heads):
            kvh = h // group if head_of is None else head_of(h, group, kv)
            k, v = k_cache[blocks, offs, kvh], v_cache[blocks, offs, kvh]
            out[s, h] = torch.softmax(k @ q[s, h] * built.scale, 0) @ v
    return out


def _merge_reference(part: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """Stage 2 in float64 from the reader's stage-1 outputs: is stage 1 right on its own?"""
    lse64 = lse.cpu().double()
    w = torch.exp2(lse64 - lse64.amax(-1, keepdim=True))
    return (w[..., None] * part.cpu().double()).sum(-2) / w.sum(-1)[..., None]


def _close(got: torch.Tensor, want: torch.Tensor, tol: float) -> torch.Tensor:
    return torch.isclose(got.cpu().double(), want, rtol=tol, atol=tol)


def _run(kernel: Any, merge: Any, case: KernelCase, built: Built, *, watch: bool = True
         ) -> tuple[str | None, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Launch on a case: (error, out, part, lse); ``watch=False`` runs the interpreter unpatched."""
    forbidden = table_padding(built.block_tables, built.used) if watch else ()
    seen: list[str] = []
    results: list[torch.Tensor] = []
    error = _launch(lambda: results.extend(launch_paged_decode(
        kernel, merge, built.q, built.cache.k, built.cache.v, built.block_tables, built.seq_lens, built.scale,
        num_splits=case.num_splits, tile_n=case.tile_n)), seen, forbidden, watch=watch)
    if error is not None:
        return error, None, None, None
    out, part, lse = results
    if seen and bool(_close(out, reference(built), TOLERANCE[case.dtype]).all()):
        return past_the_table(seen[0]).replace("the slots are right", "the output is right"), None, None, None
    return None, out, part, lse


def _diagnose(kernel: Any, merge: Any, case: KernelCase, built: Built, out: torch.Tensor, part: torch.Tensor,
              lse: torch.Tensor, want: torch.Tensor, tol: float) -> list[str]:
    """The first wrong value, then the hints whose cause a second computation confirms."""
    s, h, d = _first_mismatch(out.cpu().double(), want, tol, tol)
    group = case.num_heads // case.num_kv_heads
    n = case.seq_lens[s]
    lines = [f"sequence {s} ({n} tokens, block size {case.block_size}, {case.num_splits} split(s), tiles of "
             f"{case.tile_n}), query head {h} (KV head {h // group}), column {d}: expected {float(want[s, h, d]):.5g}, "
             f"got {float(out[s, h, d]):.5g} ({str(case.dtype).removeprefix('torch.')}, tolerance {tol:g})"]
    stage1 = _merge_reference(part, lse)
    if bool(_close(stage1, want, tol).all()):
        lines.append("stage 1 is right: its partial outputs and log-sum-exps, merged in float64, give the answer. "
                     "The merge kernel is wrong: split s's weight is exp2(lse[s] - max lse) / the sum of weights, "
                     "over the first num_splits splits only")
        return lines
    if case.num_splits > 1:
        lines.append("stage 1 is wrong: its partial outputs, merged in float64, do not give the answer either")
        empty = torch.isinf(lse.cpu()) & (lse.cpu() < 0)
        if bool((empty[..., None] & ~torch.isfinite(part.cpu())).any()):
            lines.append("hint: a split that holds no position (l = 0) must store output 0 and lse -inf, not "
                         "0 / 0: divide by l only where l > 0")
            return lines
    if runtime.BACKEND != "cuda" and not math.isfinite(float(out[s, h, d])):
        error, plain, _, _ = _run(kernel, merge, case, built, watch=False)
        if error is None and bool(_close(plain, want, tol).all()):
            lines.append("hint: without the grader's poison this case passes: a masked tl.load without other= is "
                         "read. The interpreter fills its masked lanes with 0; a GPU leaves them undefined, so the "
                         "grader fills them with NaN. Give every masked load that feeds a sum an other=")
            return lines
    if group > 1 and case.num_kv_heads > 1 and bool(
            _close(out, reference(built, head_of=lambda h, g, kv: h % kv), tol).all()):
        lines.append(f"hint: query head h shares KV head h // GROUP (here heads {h // group * group}.."
                     f"{h // group * group + group - 1} share KV head {h // group}); the rows of a program's tile are "
                     f"heads kv_head * GROUP + offs_g")
    elif _one_short(out, built, tol):
        lines.append("hint: the last position is left out: a sequence of seq_len tokens has positions "
                     "0 .. seq_len - 1, and the new token's own key (just stored) is the last")
    elif case.drop and not math.isfinite(float(out[s, h, d])):
        lines.append("hint: inf or NaN where the scores fall by 300 after the first tile: subtract the running max "
                     "(the max of every score so far, not of this tile alone) before exp2")
    return lines


def _one_short(out: torch.Tensor, built: Built, tol: float) -> bool:
    """Does ``out`` leave out every sequence's last position (judged on the sequences longer than 1)?"""
    longer = built.seq_lens.cpu() > 1
    if not bool(longer.any()):
        return False
    shorter = reference(built, context=lambda m: max(1, m - 1))
    return bool(_close(out[longer], shorter[longer], tol).all())


def check_paged_decode_kernel(kernel: Any, merge: Any, *, mark: str | Path | None = None) -> bool:
    """Grade the whole decode kernel and its merge (chapter 4, "How the graders work"); on a GPU, bandwidth too.

    ``mark``: the file the kernels were loaded from; when they pass, a note beside it records the
    file's hash, so that chapter 5 runs exactly the kernels that passed.
    """
    def run(case: KernelCase) -> list[str]:
        built = build(case)
        error, out, part, lse = _run(kernel, merge, case, built)
        if error is not None:
            return [error]
        want, tol = reference(built), TOLERANCE[case.dtype]
        if bool(_close(out, want, tol).all()):
            return []
        return _diagnose(kernel, merge, case, built, out, part, lse, want, tol)

    name = "paged_decode_kernel + merge_splits_kernel（分頁解碼核心）"
    if not grade_in_order(name, list(SHOWN_CASES) + HIDDEN_CASES, run,
                          passed=f"{name} ({len(SHOWN_CASES)} shown and {len(HIDDEN_CASES)} hidden cases)"):
        return False
    if mark is not None:
        mark_passed(mark)
    if runtime.BACKEND == "cuda":
        print(bandwidth_report(kernel, merge))
    else:
        print("  (no GPU here: the kernels ran in the interpreter; compiled timing and bandwidth are skipped)")
    return True


def try_paged_decode_kernel(kernel: Any, merge: Any, case: int | str = 0) -> dict[str, Any]:
    """Run one shown case (by index or name) and return its inputs, your output and the expected one."""
    chosen = SHOWN_CASES[case] if isinstance(case, int) else next(c for c in SHOWN_CASES if c.name == case)
    built = build(chosen)
    out, part, lse = launch_paged_decode(kernel, merge, built.q, built.cache.k, built.cache.v, built.block_tables,
                                         built.seq_lens, built.scale, num_splits=chosen.num_splits,
                                         tile_n=chosen.tile_n)
    return dict(case=chosen.name, q=built.q, k_cache=built.cache.k, v_cache=built.cache.v,
                block_tables=built.block_tables, seq_lens=built.seq_lens, scale=built.scale,
                num_splits=chosen.num_splits, tile_n=chosen.tile_n, out=out, part=part, lse=lse,
                expected=reference(built))


# --- on a GPU: the reader's kernel, compiled and timed ----------------------------------------------

def bandwidth_report(kernel: Any, merge: Any, batch: int = 16, context: int = 4096) -> str:
    """Bytes of K/V read ÷ time, for one Llama-3.2-1B layer in bf16, against the device's copy bandwidth."""
    from triton.testing import do_bench

    device = runtime.device()
    heads, kv, d, b = 32, 8, 64, 16
    blocks = batch * context // b
    k_cache = torch.randn(blocks, b, kv, d, dtype=torch.bfloat16, device=device)
    v_cache = torch.randn_like(k_cache)
    tables = torch.randperm(blocks, device=device, dtype=torch.int32).view(batch, context // b)
    seq_lens = torch.full((batch,), context, dtype=torch.int32, device=device)
    q = torch.randn(batch, heads, d, dtype=torch.bfloat16, device=device)
    ms = do_bench(lambda: launch_paged_decode(kernel, merge, q, k_cache, v_cache, tables, seq_lens, d ** -0.5,
                                              num_splits=1, tile_n=32))
    kv_bytes = 2 * k_cache.numel() * k_cache.element_size()
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy_ms = do_bench(lambda: dst.copy_(src))
    copy_gbps = 2 * src.numel() / copy_ms / 1e6   # a copy reads and writes every byte
    gbps = kv_bytes / ms / 1e6
    return (f"  compiled on {torch.cuda.get_device_name(device)}: batch {batch} x {context:,} tokens, one "
            f"Llama-3.2-1B layer in bf16: {ms:.3f} ms, {gbps:,.0f} GB/s of K/V read = {gbps / copy_gbps:.0%} of "
            f"this device's copy bandwidth ({copy_gbps:,.0f} GB/s)")


# --- the file chapter 5 imports ----------------------------------------------------------------------

def load_kernels(path: str | Path = READER_FILE) -> ModuleType:
    """Import the reader's kernel file (a fresh module each time, so an edited file is re-read)."""
    return load_file(path)


def reader_kernels(path: str | Path = READER_FILE) -> tuple[Any, Any, str]:
    """``(paged_decode_kernel, merge_splits_kernel, which)``: the reader's if they passed chapter 4's
    grader unchanged since, else the shipped solution; ``which`` says which ran, and why."""
    why = why_not_passed(path, "4")
    if why is None:
        module = load_file(path)
        return module.paged_decode_kernel, module.merge_splits_kernel, f"yours, from {path} (passed in chapter 4)"
    return solution.paged_decode_kernel, solution.merge_splits_kernel, f"the shipped solution: {why}"


# --- chapter 5: the reader's kernel as the decoder's attention ----------------------------------------

@dataclass
class TileCount:
    """What a decode backend's launches visited, counted from their launch configuration."""

    launches: int = 0
    tile_iterations: int = 0         # loop iterations over all programs of all launches
    max_tiles_per_program: int = 0   # the most tiles one (sequence, KV head, split) program looped over


def decode_backend(kernel: Any = None, merge: Any = None, *, tile_n: int = 16, num_splits: int = 1,
                   name: str = "reader_decode") -> Callable[..., torch.Tensor]:
    """A paged-attention backend for :func:`pagedkv_edu.attention.paged_attention` whose decode steps
    run ``kernel`` and ``merge`` (None: the book's decode kernel, ``attention/triton_decode.py``), with
    tiles of ``tile_n`` positions; a step with more than one new token per sequence (a prompt) runs the
    shipped unified kernel. ``backend.tiles`` counts what the decode launches visited."""
    from ..attention import paged_attention, paged_decode_attention
    from ..attention.triton_decode import launch_config

    counts = TileCount()

    def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
               seq_lens: torch.Tensor, query_start_loc: torch.Tensor, scale: float) -> torch.Tensor:
        if q.shape[0] != seq_lens.shape[0] or bool((query_start_loc.diff() != 1).any()):
            return paged_attention(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale, "triton")
        if kernel is None:
            config = launch_config(q.shape[1] // k_cache.shape[2], q.shape[2], q.dtype, tile_n=tile_n)
            out = paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, "triton", num_splits,
                                         config=config)
        else:
            out, _, _ = launch_paged_decode(kernel, merge, q, k_cache, v_cache, block_tables, seq_lens, scale,
                                            num_splits=num_splits, tile_n=tile_n, merge_one_split=False)
        per_seq = tiles_visited(seq_lens.tolist(), num_splits, tile_n)
        counts.launches += 1
        counts.tile_iterations += sum(per_seq) * k_cache.shape[2]
        counts.max_tiles_per_program = max(counts.max_tiles_per_program,
                                           max(-(-(-(-n // num_splits)) // tile_n) for n in seq_lens.tolist()))
        return out

    attend.__name__ = attend.__qualname__ = name
    attend.tiles = counts   # type: ignore[attr-defined]
    return attend
