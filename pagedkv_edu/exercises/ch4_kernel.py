"""Grader for chapter 4's last exercise: the whole paged decode kernel and its split-K merge.

The reader's two kernels are saved to :data:`READER_FILE`; :func:`check_paged_decode_kernel`
grades them against float64 references, every split's partial output and log-sum-exp first,
then the merged output (chapter 4's "How the graders work" lists the cases, the poison and the
watched loads and stores). :func:`reader_kernels` is how chapter 5 finds them (the saved file if
it passed, else the shipped solution), and :func:`decode_backend` runs them as the decoder's attention.
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
from ..viz.kernel_view import split_ranges
from .ch4_triton import (Guarded, PagedCache, Read, _dot_floor, _first_mismatch, _launch, _np2, past_the_table,
                         table_padding)
from .grading import NotSolved, grade_in_order, seeded
from .messages import Message, tr
from .my_engine import load_file, mark_passed, why_not_passed
from .solutions import ch4_kernel as solution

READER_FILE = Path("my_kernels") / "paged_decode.py"
"""Where chapter 4 saves the reader's kernels, relative to the notebooks (git ignores it)."""

TOLERANCE = {torch.float32: 2e-5, torch.float16: 3e-3, torch.bfloat16: 2.5e-2}


# --- launching the reader's two kernels -------------------------------------------------------------

def launch_paged_decode(kernel: Any, merge: Any, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float, *, num_splits: int = 1,
                        tile_n: int = 16, out: torch.Tensor | None = None, part: torch.Tensor | None = None,
                        lse: torch.Tensor | None = None, merge_one_split: bool = True,
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch ``kernel`` (stage 1) then ``merge`` (stage 2); return ``(out, part, lse)``.

    ``part`` (``[num_seqs, num_heads, num_splits, head_dim]``) and ``lse`` (``[num_seqs, num_heads,
    num_splits]``) are float32; those not given, and ``out``, are filled with NaN before the launch
    (the grader gives views into larger NaN buffers, any strides but a contiguous head_dim). ``q`` is
    ``[num_seqs, num_heads, head_dim]``; the cache is NHD with any strides but a contiguous head_dim
    (K and V share strides). With one split, stage 1's output is the answer: ``merge_one_split=False``
    copies it instead of launching the merge.
    """
    num_seqs, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    floor = _dot_floor()
    if part is None:
        part = torch.full((num_seqs, num_heads, num_splits, head_dim), float("nan"), dtype=torch.float32,
                          device=q.device)
    if lse is None:
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
    return [sum(-(-(end - start) // tile_n) for start, end in split_ranges(n, num_splits, tile_n)) for n in seq_lens]


# --- the cases ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelCase:
    name: Message
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
    KernelCase(tr("block size 5, GQA group 3 (6 query heads, 2 KV heads), lengths 1, 5, 6 and 37, tiles of 8"),
               5, 6, 2, 8, (1, 5, 6, 37)),
    KernelCase(tr("scores that fall by about 300 (base 2) after the first tile: exp2 overflows without the running "
                  "max"), 4, 2, 1, 8, (30,), drop=True, seed=1),
    KernelCase(tr("split-K: 3 splits, block size 6, GQA group 4, lengths 7 (two splits empty), 48 and 61"),
               6, 8, 2, 8, (7, 48, 61), num_splits=3, seed=2),
    KernelCase(tr("block size 12, head_dim 6 (padded to 8), 2 splits, float16, lengths 24 and 25"),
               12, 4, 2, 6, (24, 25), num_splits=2, dtype=torch.float16, seed=3),
)


_HIDDEN_SEED = 44
HIDDEN_COUNT = 24
"""Every pairing of a GQA group (1-4) with a dtype twice; each case holds one of the six edge lengths."""

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _draw_case(rng: random.Random, i: int) -> KernelCase:
    """Case ``i``: group ``i % 4 + 1``, dtype ``i % 3``, and the edge length ``i % 6`` of its block and tile
    sizes beside one or two others; split counts up to 6, so short sequences leave splits empty."""
    b = rng.choice((3, 5, 6, 7, 12, 1, 16))
    tile = rng.choice((4, 8, 16))
    group, kv = i % 4 + 1, rng.choice((1, 2))
    edges = (1, max(1, b - 1), b, b + 1, tile, tile + 1)
    lens = (edges[i % 6],) + tuple(rng.choice(edges + (rng.randint(2, 70),)) for _ in range(rng.randint(0, 2)))
    splits = rng.choice((1, 2, 3, 4, 6))
    dtype = _DTYPES[i % 3]
    return KernelCase(
        tr("hidden case {n} (seeded random): block size {block_size}, tiles of {tile_n}, {heads} query heads on "
           "{kv_heads} KV head(s), {seqs} sequence(s), {splits} split(s), {dtype}", n=i + 1, block_size=b,
           tile_n=tile, heads=kv * group, kv_heads=kv, seqs=len(lens), splits=splits,
           dtype=str(dtype).removeprefix("torch.")),
        b, kv * group, kv, rng.choice((4, 5, 8, 6)), lens, splits, tile, dtype, _HIDDEN_SEED * 100 + i)


HIDDEN_CASES = seeded(HIDDEN_COUNT, _HIDDEN_SEED, _draw_case)


# --- a case's inputs and outputs, each inside a NaN buffer the watch guards ------------------------

def _padded(name: str, shape: tuple[int, ...], pads: tuple[int, ...], dtype: torch.dtype, dims: tuple[str, ...],
            advice: dict[str, str], writable: bool) -> Guarded:
    """A NaN tensor of ``shape`` as the leading corner of a buffer ``pads`` larger in each dimension."""
    buffer = torch.full(tuple(n + p for n, p in zip(shape, pads)), float("nan"), dtype=dtype,
                        device=runtime.device())
    return Guarded(name, buffer, buffer[tuple(slice(0, n) for n in shape)], dims, writable, advice)


_PAST_GROUP = tr("rows g >= GROUP of a KV head's tile are no query heads of its own (on the last KV head, past the "
                 "last one): mask them with mask_g = offs_g < GROUP")
_PAST_HEAD_DIM = tr("columns past HEAD_DIM are padding: mask them with mask_d = offs_d < HEAD_DIM")
_PAST_SPLITS = tr("only the first num_splits splits exist: mask the split axis with offs_s < num_splits")


@dataclass
class Built:
    """A case's inputs and outputs: a strided paged cache (NaN where no token lives), tables padded with a
    guard block, and q, part, lse and out inside NaN buffers whose padding the watch names."""

    q_guard: Guarded
    cache: PagedCache
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    used: list[int]
    guard: int
    scale: float
    outputs: tuple[Guarded, Guarded, Guarded]   # part, lse, out: the only tensors a kernel may store to

    @property
    def q(self) -> torch.Tensor:
        return self.q_guard.view

    def reset(self, fill: float = float("nan")) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Fill part, lse and out (and their padding) with ``fill`` before a launch; return the three views."""
        for g in self.outputs:
            g.buffer.fill_(fill)
        part, lse, out = (g.view for g in self.outputs)
        return part, lse, out


def build(case: KernelCase) -> Built:
    """The inputs of ``case``, seeded: the same tensors every time."""
    device = runtime.device()
    gen = torch.Generator().manual_seed(case.seed)
    rng = random.Random(case.seed)
    b, kv, d = case.block_size, case.num_kv_heads, case.head_dim
    group = case.num_heads // kv
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
    # Padding past every dimension a mask guards: a lane the kernel forgot to mask lands in it, where the watch
    # names it, instead of in the next sequence's rows or outside the buffer.
    num_seqs, heads, splits = len(case.seq_lens), case.num_heads, case.num_splits
    floor = _dot_floor()
    pad_h, pad_d, pad_s = _np2(group, floor) - group + 1, _np2(d, floor) - d + 1, _np2(splits) - splits + 1
    q_guard = _padded("q", (num_seqs, heads, d), (0, pad_h, pad_d), case.dtype, ("sequence", "head", "column"),
                      {"head": _PAST_GROUP, "column": _PAST_HEAD_DIM}, writable=False)
    q = q_guard.view
    q.copy_(torch.randn(q.shape, generator=gen))
    scale = d ** -0.5
    for s, (table, n) in enumerate(zip(tables, case.seq_lens)):
        for pos in range(n):
            blk, off = table[pos // b], pos % b
            k = torch.randn(kv, d, generator=gen)
            if case.drop and s == 0 and pos < case.tile_n:   # these keys point along their query heads
                qh = q[s].float().view(kv, group, d)[:, 0]
                k = qh * (300.0 / (LOG2E * scale * (qh * qh).sum(-1, keepdim=True))) + 0.01 * k
            cache.k[blk, off] = k.to(case.dtype)
            cache.v[blk, off] = torch.randn(kv, d, generator=gen).to(case.dtype)
    outputs = (
        _padded("part", (num_seqs, heads, splits, d), (0, pad_h, pad_s, pad_d), torch.float32,
                ("sequence", "head", "split", "column"),
                {"head": _PAST_GROUP, "split": _PAST_SPLITS, "column": _PAST_HEAD_DIM}, writable=True),
        _padded("lse", (num_seqs, heads, splits), (0, pad_h, pad_s), torch.float32, ("sequence", "head", "split"),
                {"head": _PAST_GROUP, "split": _PAST_SPLITS}, writable=True),
        _padded("out", (num_seqs, heads, d), (0, 1, pad_d), case.dtype, ("sequence", "head", "column"),
                {"head": tr("the merge's grid has one program per query head"), "column": _PAST_HEAD_DIM},
                writable=True))
    table_tensor = torch.tensor(tables, dtype=torch.int32, device=device)
    return Built(q_guard, cache, table_tensor, torch.tensor(case.seq_lens, dtype=torch.int32, device=device),
                 used, guard, scale, outputs)


# --- float64 references: each split, and the merged output ----------------------------------------

def _scores(built: Built, s: int, n: int, head_of: Callable[[int, int, int], int] | None = None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence ``s``'s first ``n`` positions through its block table, in float64: base-2 scores
    ``[num_heads, n]`` (``q·k · scale · log2 e``, as the kernels compute them) and values ``[num_heads, n, D]``.
    ``head_of(h, group, num_kv_heads)`` picks query head h's KV head (a mistake's, for a hint)."""
    q, k_cache, v_cache = built.q.cpu().double(), built.cache.k.cpu().double(), built.cache.v.cpu().double()
    num_heads, kv, b = q.shape[1], k_cache.shape[2], k_cache.shape[1]
    group = num_heads // kv
    table = built.block_tables[s].cpu().long()
    pos = torch.arange(n)
    blocks, offs = table[pos // b], pos % b
    kv_of = [h // group if head_of is None else head_of(h, group, kv) for h in range(num_heads)]
    k, v = k_cache[blocks, offs][:, kv_of], v_cache[blocks, offs][:, kv_of]   # [n, num_heads, D]
    scores = torch.einsum("hd,nhd->hn", q[s], k) * (built.scale * LOG2E)   # en: not shown to readers
    return scores, v.transpose(0, 1)


@dataclass
class Partial:
    """One split's attention in float64, per query head: what the kernel stores, and the m and l behind it."""

    part: torch.Tensor   # [num_heads, D], the normalised partial output (0 for an empty split)
    lse: torch.Tensor    # [num_heads], base 2 (-inf for an empty split)
    m: torch.Tensor      # [num_heads], the split's largest base-2 score
    l: torch.Tensor      # [num_heads], the sum of exp2(score - m)


def _partial(scores: torch.Tensor, v: torch.Tensor, start: int, end: int) -> Partial:
    heads, d = v.shape[0], v.shape[2]
    if end <= start:
        return Partial(torch.zeros(heads, d, dtype=torch.float64), torch.full((heads,), -math.inf, dtype=torch.float64),
                       torch.full((heads,), -math.inf, dtype=torch.float64), torch.zeros(heads, dtype=torch.float64))
    x = scores[:, start:end]
    m = x.max(1).values
    p = torch.exp2(x - m[:, None])
    l = p.sum(1)
    weighted = torch.einsum("hn,hnd->hd", p, v[:, start:end])   # en: not shown to readers
    return Partial(weighted / l[:, None], m + torch.log2(l), m, l)


def split_reference(built: Built, num_splits: int, tile_n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every split's partial output ``[S, H, num_splits, D]`` and base-2 log-sum-exp ``[S, H, num_splits]``
    in float64, over the kernels' split ranges (:func:`~pagedkv_edu.viz.kernel_view.split_ranges`)."""
    num_seqs, num_heads, d = built.q.shape
    part = torch.zeros(num_seqs, num_heads, num_splits, d, dtype=torch.float64)
    lse = torch.zeros(num_seqs, num_heads, num_splits, dtype=torch.float64)
    for s, n in enumerate(built.seq_lens.tolist()):
        scores, v = _scores(built, s, n)
        for k, (start, end) in enumerate(split_ranges(n, num_splits, tile_n)):
            p = _partial(scores, v, start, end)
            part[s, :, k], lse[s, :, k] = p.part, p.lse
    return part, lse


def reference(built: Built) -> torch.Tensor:
    """Decode attention in float64 through the block tables: softmax over each sequence's positions."""
    num_seqs, num_heads, d = built.q.shape
    out = torch.zeros(num_seqs, num_heads, d, dtype=torch.float64)
    for s, n in enumerate(built.seq_lens.tolist()):
        scores, v = _scores(built, s, n)
        out[s] = _partial(scores, v, 0, n).part
    return out


def _close(got: torch.Tensor, want: torch.Tensor, tol: float) -> torch.Tensor:
    return torch.isclose(got.cpu().double(), want, rtol=tol, atol=tol)


def _first_wrong_split(part: torch.Tensor, lse: torch.Tensor, want_part: torch.Tensor, want_lse: torch.Tensor,
                       tol: float) -> tuple[int, int, int] | None:
    """The first (sequence, query head, split) whose part or lse is off the reference (NaN always is)."""
    bad = ~_close(part, want_part, tol).all(-1) | ~_close(lse, want_lse, tol)
    return tuple(int(i) for i in bad.nonzero()[0]) if bool(bad.any()) else None   # type: ignore[return-value]


# --- running a case ----------------------------------------------------------------------------------

@dataclass
class Ran:
    """One launch on a case: copies of stage 1's part and lse and of the merged out, and the watched loads."""

    out: torch.Tensor
    part: torch.Tensor
    lse: torch.Tensor
    reads: list[Read]


def _run(kernel: Any, merge: Any, case: KernelCase, built: Built, *, poison: bool = True,
         fill: float = float("nan")) -> str | Ran:
    """Launch on a case under the watch: the error text, or what it wrote. ``poison=False`` lets masked loads
    without ``other=`` read the interpreter's 0; ``fill`` is what part, lse and out hold before the launch."""
    part, lse, out = built.reset(fill)
    reads: list[Read] = []
    error = _launch(lambda: launch_paged_decode(
        kernel, merge, built.q, built.cache.k, built.cache.v, built.block_tables, built.seq_lens, built.scale,
        num_splits=case.num_splits, tile_n=case.tile_n, out=out, part=part, lse=lse),
        reads, table_padding(built.block_tables, built.used), poison=poison,
        guarded=(built.q_guard, *built.outputs), inside=(built.cache.buffer, built.block_tables, built.seq_lens))
    return error if error is not None else Ran(out.clone(), part.clone(), lse.clone(), reads)   # re-runs reuse them


def _all_right(ran: str | Ran, built: Built, case: KernelCase) -> bool:
    """Does a (re-)run give every split's part and lse and the merged output within tolerance?"""
    if isinstance(ran, str):
        return False
    tol = TOLERANCE[case.dtype]
    want_part, want_lse = split_reference(built, case.num_splits, case.tile_n)
    return (_first_wrong_split(ran.part, ran.lse, want_part, want_lse, tol) is None
            and bool(_close(ran.out, reference(built), tol).all()))


def _grade(kernel: Any, merge: Any, case: KernelCase) -> list[str]:
    """What is wrong on ``case``: the launch's error, the first wrong split, the merged output, a watched read."""
    built = build(case)
    ran = _run(kernel, merge, case, built)
    if isinstance(ran, str):
        return [ran]
    tol = TOLERANCE[case.dtype]
    want_part, want_lse = split_reference(built, case.num_splits, case.tile_n)
    wrong = _first_wrong_split(ran.part, ran.lse, want_part, want_lse, tol)
    if wrong is not None:
        return _split_failure(kernel, merge, case, built, ran, wrong, want_part, want_lse)
    want = reference(built)
    if not bool(_close(ran.out, want, tol).all()):
        return _merge_failure(kernel, merge, case, built, ran, want)
    if ran.reads:
        return [_read_failure(ran.reads[0])]
    return []


def _read_failure(read: Read) -> Message:
    """The failure of a kernel whose values are right but which read a watched address."""
    if isinstance(read.region, Guarded):
        return tr("every split and the output are right, but a load whose lanes were not masked read {read}, "
                  "padding outside {tensor}: {advice} (on a GPU the tensor may end there, and the read would fall "
                  "outside it)", read=read.text, tensor=read.region.name, advice=read.advice)
    return past_the_table(read, tr("every split and the output are right"))


def _where(case: KernelCase, s: int, h: int, k: int) -> str:
    """The program a (sequence, query head, split) belongs to, and the split's positions."""
    n = case.seq_lens[s]
    group = case.num_heads // case.num_kv_heads
    start, end = split_ranges(n, case.num_splits, case.tile_n)[k]
    chunk = -(-(-(-n // case.num_splits)) // case.tile_n) * case.tile_n
    span = (tr("positions {start}..{last}", start=start, last=end - 1) if end > start else
            tr("no position: chunks of {chunk}, so split {k} would start at {start}, at or past the end", chunk=chunk,
               k=k, start=k * chunk))
    tokens = tr("{n} tokens", n=n) if n != 1 else tr("{n} token", n=n)
    return tr("sequence {s} ({tokens}, block size {block_size}, {splits} split(s) of whole tiles of {tile_n}), query "
              "head {h} (KV head {kv_head}), split {k} ({span})", s=s, tokens=tokens, block_size=case.block_size,
              splits=case.num_splits, tile_n=case.tile_n, h=h, kv_head=h // group, k=k, span=span)


def _split_failure(kernel: Any, merge: Any, case: KernelCase, built: Built, ran: Ran, wrong: tuple[int, int, int],
                   want_part: torch.Tensor, want_lse: torch.Tensor) -> list[str]:
    """What split ``wrong`` wrote against the reference, then the hints a second computation or run confirms."""
    s, h, k = wrong
    tol = TOLERANCE[case.dtype]
    got_part, got_lse = ran.part[s, h, k].cpu().double(), float(ran.lse[s, h, k])
    bad = ~_close(got_part, want_part[s, h, k], tol)
    d = int(bad.nonzero()[0]) if bool(bad.any()) else 0
    lines = [tr("{case}:", case=_where(case, s, h, k)),
             tr("it stored part[..., column {d}] = {part:.6g} (expected {want_part:.6g}) and lse = {lse:.6g} "
                "(expected {want_lse:.6g}, base 2), against a float64 reference of this split ({dtype} cache, "
                "tolerance {tol:g})", d=d, part=float(got_part[d]), want_part=float(want_part[s, h, k, d]),
                lse=got_lse, want_lse=float(want_lse[s, h, k]), dtype=str(case.dtype).removeprefix("torch."),
                tol=tol)]
    start, end = split_ranges(case.seq_lens[s], case.num_splits, case.tile_n)[k]
    if end <= start:
        return lines + _empty_split_hints(kernel, merge, case, built, ran, wrong)
    q_reads = [r for r in ran.reads if r.region is built.q_guard]
    if q_reads:
        lines.append(tr("a load whose lanes were not masked read {read}, q's NaN padding", read=q_reads[0].text))
        built.q_guard.fill_padding(0.0)
        try:
            confirmed = _all_right(_run(kernel, merge, case, built), built, case)
        finally:
            built.q_guard.fill_padding(float("nan"))
        if confirmed:
            return lines + [tr("hint: that read is the cause: with q's padding zeroed instead of NaN, every split is "
                               "right. Load q with mask=mask_g[:, None] & mask_d[None, :] and other=0.0 ({advice})",
                               advice=q_reads[0].advice)]
    elif ran.reads:
        lines.append(tr("(a load whose lanes were not masked also read {read}, past the sequence's last block)",
                        read=ran.reads[0].text))
    finite = math.isfinite(float(got_part[d])) and math.isfinite(got_lse)
    if runtime.BACKEND != "cuda" and not finite:
        if _all_right(_run(kernel, merge, case, built, poison=False), built, case):
            return lines + [tr("hint: without the grader's poison this case passes: a masked tl.load without other= "
                               "is read. The interpreter fills its masked lanes with 0; a GPU leaves them undefined, "
                               "so the grader fills them with NaN. Give every masked load that feeds a sum an other=")]
    hint = _range_hint(case, built, ran, wrong, tol) or _value_hint(case, built, ran, wrong, tol)
    if hint:
        return lines + [hint]
    if case.drop and not math.isfinite(float(got_part[d])):
        lines.append(tr("hint: inf or NaN where the scores fall by 300 after the first tile: subtract the running "
                        "max (the max of every score so far, not of this tile alone) before exp2"))
    return lines


def _empty_split_hints(kernel: Any, merge: Any, case: KernelCase, built: Built, ran: Ran,
                       wrong: tuple[int, int, int]) -> list[str]:
    """An empty split must store part 0 and lse -inf: say which of the two it got wrong, and how it showed."""
    s, h, k = wrong
    got_part, got_lse = ran.part[s, h, k].cpu(), float(ran.lse[s, h, k])
    if math.isnan(got_lse) and bool(torch.isnan(got_part).all()):
        sentinel = 12345.0
        again = _run(kernel, merge, case, built, fill=sentinel)
        if isinstance(again, Ran) and float(again.lse[s, h, k]) == sentinel and bool(
                (again.part[s, h, k] == sentinel).all()):
            return [tr("hint: split {k} holds no position and stored nothing: part and lse kept what the grader put "
                       "there before the launch (NaN, and {sentinel:g} in a second run). An empty split must still "
                       "store part = 0 and lse = -inf, whose weight in the merge is 2^-inf = 0", k=k,
                       sentinel=sentinel)]
    if got_lse == -math.inf and not bool(torch.isfinite(got_part).all()):
        return [tr("hint: a split that holds no position (l = 0) must store output 0, not 0 / 0: divide by l only "
                   "where l > 0 (its lse, -inf, is right)")]
    if math.isfinite(got_lse):
        hint = _range_hint(case, built, ran, wrong, TOLERANCE[case.dtype])
        return [hint or tr("hint: split {k} holds no position, yet it stored a finite lse: its range must come from "
                           "chunk = cdiv(cdiv(seq_len, num_splits), TILE_N) * TILE_N, start = split * chunk", k=k)]
    return [tr("hint: a split that holds no position must store part = 0 and lse = -inf")]


def _range_hint(case: KernelCase, built: Built, ran: Ran, wrong: tuple[int, int, int],
                tol: float) -> Message | None:
    """If split ``wrong`` holds exactly the attention over another range a mistake gives, name the mistake."""
    s, h, k = wrong
    n = case.seq_lens[s]
    num, tile = case.num_splits, case.tile_n
    c = -(-n // num)
    shorter = tr("the positions of a sequence one token shorter")
    mistakes = (
        (tr("the whole sequence"), [(0, n)] * num),
        (tr("chunks of cdiv(seq_len, num_splits) = {c} positions, not whole tiles", c=c),
         [(min(j * c, n), min((j + 1) * c, n)) for j in range(num)]),
        (shorter, split_ranges(max(n - 1, 0), num, tile)),
    )
    scores, v = _scores(built, s, n)
    right = split_ranges(n, num, tile)[k]
    for what, ranges in mistakes:
        start, end = ranges[k]
        if (start, end) == right:
            continue
        alt = _partial(scores, v, start, end)
        if bool(_close(ran.part[s, h, k], alt.part[h], tol).all()) and bool(
                _close(ran.lse[s, h, k:k + 1], alt.lse[h:h + 1], tol).all()):
            held = tr("positions {start}..{last}", start=start, last=end - 1) if end > start else tr("no position")
            if what is shorter:
                return tr("hint: split {k} holds {held}, the split of a sequence one token shorter: the last position "
                          "is left out. A sequence of seq_len tokens has positions 0 .. seq_len - 1, and the new "
                          "token's own key (just stored) is the last", k=k, held=held)
            own = (tr("positions {start}..{last}", start=right[0], last=right[1] - 1) if right[1] > right[0] else
                   tr("no position"))
            return tr("hint: split {k} attended over {held} ({what}), where it holds {own}: chunk = "
                      "cdiv(cdiv(seq_len, num_splits), TILE_N) * TILE_N, start = split * chunk, end = min(start + "
                      "chunk, seq_len)", k=k, held=held, what=what, own=own)
    return None


def _value_hint(case: KernelCase, built: Built, ran: Ran, wrong: tuple[int, int, int],
                tol: float) -> Message | None:
    """If split ``wrong``'s values are what a known mistake computes from the right positions, name it."""
    s, h, k = wrong
    n = case.seq_lens[s]
    start, end = split_ranges(n, case.num_splits, case.tile_n)[k]
    right = _partial(*_scores(built, s, n), start, end)
    got_part, got_lse = ran.part[s, h, k], ran.lse[s, h, k:k + 1]
    part_ok = bool(_close(got_part, right.part[h], tol).all())
    if part_ok and any(bool(_close(got_lse, alt[h:h + 1], tol).all())
                       for alt in (right.m + torch.log(right.l), right.lse * math.log(2))):
        return tr("hint: lse is the base-2 log-sum-exp, m_i + log2(l_i): the scores are base-2 logits (qk_scale "
                  "holds log2 e), and the merge weighs split s by exp2(lse[s] - max lse)")
    if bool(_close(got_part, right.part[h] * right.l[h], tol).all()):
        return tr("hint: part is the normalised partial output acc / l_i, not the accumulator acc")
    group = case.num_heads // case.num_kv_heads
    if group > 1 and case.num_kv_heads > 1:
        scores, v = _scores(built, s, n, head_of=lambda h_, g, kv: h_ % kv)
        if bool(_close(got_part, _partial(scores, v, start, end).part[h], tol).all()):
            first = h // group * group
            return tr("hint: query head h shares KV head h // GROUP (here heads {first}..{last} share KV head "
                      "{kv_head}); the rows of a program's tile are heads kv_head * GROUP + offs_g", first=first,
                      last=first + group - 1, kv_head=h // group)
    return None


def _merge_failure(kernel: Any, merge: Any, case: KernelCase, built: Built, ran: Ran, want: torch.Tensor) -> list[str]:
    """Every split is right and the merged output is not: the merge is wrong; a watched read or a re-run says how."""
    tol = TOLERANCE[case.dtype]
    s, h, d = _first_mismatch(ran.out.cpu().double(), want, tol, tol)
    lines = [tr("sequence {s} ({tokens} tokens, {splits} split(s)), query head {h}, column {d} of the merged output: "
                "expected {expected:.5g}, got {got:.5g} ({dtype}, tolerance {tol:g})", s=s, tokens=case.seq_lens[s],
                splits=case.num_splits, h=h, d=d, expected=float(want[s, h, d]), got=float(ran.out[s, h, d]),
                dtype=str(case.dtype).removeprefix("torch."), tol=tol),
             tr("every split's part and lse are right (checked against float64 first): the merge kernel is wrong. "
                "Split s's weight is exp2(lse[s] - max lse) / the sum of weights, over the first num_splits splits "
                "only")]
    past = [r for r in ran.reads if r.region in built.outputs]
    if past:
        lines.append(tr("hint: it read {read}, padding past the splits stage 1 wrote: {advice}", read=past[0].text,
                        advice=past[0].advice))
    elif runtime.BACKEND != "cuda" and not math.isfinite(float(ran.out[s, h, d])):
        if _all_right(_run(kernel, merge, case, built, poison=False), built, case):
            lines.append(tr("hint: without the grader's poison this case passes: a masked tl.load without other= is "
                            "read; give every masked load that feeds a sum an other="))
    return lines


def check_paged_decode_kernel(kernel: Any, merge: Any, *, mark: str | Path | None = None) -> bool:
    """Grade the whole decode kernel and its merge (chapter 4, "How the graders work"); on a GPU, bandwidth too.

    ``mark``: the file the kernels were loaded from; when they pass, a note beside it records the
    file's hash, so that chapter 5 runs exactly the kernels that passed.
    """
    name = "paged_decode_kernel + merge_splits_kernel（分頁解碼核心）"
    counted = tr("{shown} shown and {hidden} hidden cases, every split checked", shown=len(SHOWN_CASES),
                 hidden=len(HIDDEN_CASES))
    if not grade_in_order(name, list(SHOWN_CASES) + HIDDEN_CASES, lambda case: _grade(kernel, merge, case),
                          passed=tr("{name} ({counted})", name=name, counted=counted)):
        return False
    if mark is not None:
        mark_passed(mark)
    if runtime.BACKEND == "cuda":
        print(bandwidth_report(kernel, merge))
    else:
        print(f"  {tr('(no GPU here: the kernels ran in the interpreter; compiled timing and bandwidth are skipped)')}")
    return True


def try_paged_decode_kernel(kernel: Any, merge: Any, case: int | str = 0) -> dict[str, Any]:
    """Run one shown case (by index or name), watched as the grader runs it; return its inputs, your outputs
    (``out``, and stage 1's ``part`` and ``lse``; NaN where nothing was stored), the expected ones, and
    ``problems``, the grader's lines on this case (empty when it passes)."""
    chosen = SHOWN_CASES[case] if isinstance(case, int) else next(c for c in SHOWN_CASES
                                                                  if case in (c.name, str(c.name)))
    try:
        problems = _grade(kernel, merge, chosen)
    except NotSolved:
        raise NotImplementedError(tr("this kernel is still the stub: write it first")) from None
    built = build(chosen)
    _run(kernel, merge, chosen, built)
    part, lse, out = (g.view for g in built.outputs)
    expected_part, expected_lse = split_reference(built, chosen.num_splits, chosen.tile_n)
    return dict(case=chosen.name, q=built.q, k_cache=built.cache.k, v_cache=built.cache.v,
                block_tables=built.block_tables, seq_lens=built.seq_lens, scale=built.scale,
                num_splits=chosen.num_splits, tile_n=chosen.tile_n, out=out, part=part, lse=lse,
                expected=reference(built), expected_part=expected_part, expected_lse=expected_lse,
                problems=problems)


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
    return tr("  compiled on {device}: batch {batch} x {context:,} tokens, one Llama-3.2-1B layer in bf16: {ms:.3f} "
              "ms, {gbps:,.0f} GB/s of K/V read = {share:.0%} of this device's copy bandwidth ({copy_gbps:,.0f} GB/s)",
              device=torch.cuda.get_device_name(device), batch=batch, context=context, ms=ms, gbps=gbps,
              share=gbps / copy_gbps, copy_gbps=copy_gbps)


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
        return module.paged_decode_kernel, module.merge_splits_kernel, tr("yours, from {path} (passed in chapter 4)",
                                                                          path=path)
    return solution.paged_decode_kernel, solution.merge_splits_kernel, tr("the shipped solution: {why}", why=why)


# --- chapter 5: the reader's kernel as the decoder's attention ----------------------------------------

@dataclass
class TileCount:
    """What a decode backend's launches visited, counted from their launch configuration."""

    launches: int = 0
    tile_iterations: int = 0         # loop iterations over all programs of all launches
    max_tiles_per_program: int = 0   # the most tiles one (sequence, KV head, split) program looped over
    merge_launches: int = 0          # launches of the merge (stage 2): every one with num_splits > 1


def decode_backend(kernel: Any = None, merge: Any = None, *, tile_n: int = 16, num_splits: int = 1,
                   name: str = "reader_decode") -> Callable[..., torch.Tensor]:
    """A paged-attention backend for :func:`pagedkv_edu.attention.paged_attention` whose decode steps
    run ``kernel`` and ``merge`` (None: the book's decode kernel, ``attention/triton_decode.py``), with
    tiles of ``tile_n`` positions in ``num_splits`` splits per sequence (with more than one, every decode
    step runs the merge too; with one, stage 1's output is the answer); a step with more than one new
    token per sequence (a prompt) runs the shipped unified kernel. ``backend.tiles`` counts what the
    decode launches visited."""
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
        counts.merge_launches += num_splits > 1
        counts.tile_iterations += sum(per_seq) * k_cache.shape[2]
        counts.max_tiles_per_program = max(counts.max_tiles_per_program,
                                           max(-(-(-(-n // num_splits)) // tile_n) for n in seq_lens.tolist()))
        return out

    attend.__name__ = attend.__qualname__ = name
    attend.tiles = counts   # type: ignore[attr-defined]
    return attend
