"""Graders for chapter 4's first steps: the online-softmax update in PyTorch, and four Triton warm-ups.

The update is replayed tile by tile and the first tile and quantity (max, sum, accumulator) off
the contract is named; one case has scores near 1,000 (overflow without the running max), one a
tile of only padding (NaN from a tile-local max).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .grading import Raised, Reader, grade, grade_in_order, seeded, short
from .messages import Message, tr
from .solutions import ch4 as reference


# --- online softmax ----------------------------------------------------------------

@dataclass(frozen=True)
class SoftmaxCase:
    name: Message
    tiles: tuple[int, ...]  # tokens per tile
    offset_per_tile: float  # tile t's scores are centred on base + t * offset: positive = the max keeps growing
    base: float = 0.0
    mask_last: bool = False  # the last tile's final tokens are padding (-inf), as in a kernel's ragged tile
    group: int = 3           # query heads sharing the KV head (G)
    head_dim: int = 4
    seed: int = 0
    dtype: torch.dtype = torch.float64   # of the scores, the values and the running state


SOFTMAX_CASES: tuple[SoftmaxCase, ...] = (
    SoftmaxCase(tr("random scores, four tiles of 8"), (8, 8, 8, 8), 0.0),
    SoftmaxCase(tr("the max grows every tile (old sums must be rescaled)"), (4, 4, 4), 3.0),
    SoftmaxCase(tr("the max shrinks after the first tile"), (4, 4, 4), -3.0),
    SoftmaxCase(tr("scores near 1,000 (exp overflows without the running max)"), (4, 4), 5.0, base=1000.0),
    SoftmaxCase(tr("a ragged last tile padded with -inf"), (8, 8, 8), 0.0, mask_last=True),
    SoftmaxCase(tr("one tile"), (16,), 0.0),
    SoftmaxCase(tr("a last tile of only padding (-inf): a tile-local max gives NaN"), (4, 4, 1), 0.0,
                mask_last=True),
)

# Relative and (relative to the largest value) absolute tolerance of each dtype's state.
TOLERANCE = {torch.float64: (1e-9, 1e-12), torch.float32: (1e-4, 1e-6)}


_HIDDEN_SEED = 5


def _draw_softmax_case(rng: random.Random, i: int) -> SoftmaxCase:
    tiles = tuple(rng.choice((1, 2, 3, 5, 6, 7, 8, 12, 16)) for _ in range(rng.randint(1, 4)))
    return SoftmaxCase(tr("hidden case {n}", n=i + 1), tiles, rng.uniform(-4, 4),
                       rng.choice((0.0, 0.0, -30.0, 50.0, 1000.0)), rng.random() < 0.3, rng.randint(1, 4),
                       rng.randint(1, 6), _HIDDEN_SEED * 1000 + i, (torch.float64, torch.float32)[i % 2])


HIDDEN_SOFTMAX_CASES = seeded(40, _HIDDEN_SEED, _draw_softmax_case)


def softmax_case_data(case: SoftmaxCase) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The case's per-tile scores [group, T] and values [T, head_dim], in the case's dtype."""
    gen = torch.Generator().manual_seed(case.seed)
    scores, values = [], []
    for t, n in enumerate(case.tiles):
        s = torch.randn(case.group, n, generator=gen, dtype=torch.float64) + case.base + t * case.offset_per_tile
        if case.mask_last and t == len(case.tiles) - 1 and t > 0:
            s[:, n // 2:] = float("-inf")
        scores.append(s.to(case.dtype))
        values.append(torch.randn(n, case.head_dim, generator=gen, dtype=torch.float64).to(case.dtype))
    return scores, values


def initial_state(group: int, head_dim: int,
                  dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Before any tile: max -inf, sum 0, accumulator 0."""
    return (torch.full((group,), float("-inf"), dtype=dtype), torch.zeros(group, dtype=dtype),
            torch.zeros(group, head_dim, dtype=dtype))


_QUANTITIES = (tr("m (running max)"), tr("l (running sum)"), tr("acc (running output)"))


def _state_diff(got: object, want: tuple[torch.Tensor, ...], dtype: torch.dtype) -> list[str]:
    """What is wrong with the returned state: its form, its dtype, or its values and by how much."""
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return [tr("expected a tuple (m, l, acc), got {got}", got=short(got))]
    rtol, atol = TOLERANCE[dtype]
    diffs = []
    dtypes = {g.dtype for g in got if isinstance(g, torch.Tensor)}
    if len(dtypes) == 1 and dtype not in dtypes and all(isinstance(g, torch.Tensor) for g in got):
        return [tr("dtype: m, l and acc are {got}, but the state and the inputs are {dtype}: "
                   "keep the state in the dtype it was given", got=dtypes.pop(), dtype=dtype)]
    for name, g, w in zip(_QUANTITIES, got, want):
        if not isinstance(g, torch.Tensor) or g.shape != w.shape:
            shape = tuple(g.shape) if isinstance(g, torch.Tensor) else short(g)
            diffs.append(tr("{name}: expected shape {expected}, got {shape}", name=name, expected=tuple(w.shape),
                            shape=shape))
            continue
        if g.dtype != dtype:
            diffs.append(tr("{name}: dtype {got}, but the state and the inputs are {dtype}: "
                            "keep the state in the dtype it was given", name=name, got=g.dtype, dtype=dtype))
            continue
        g64 = g.double()
        err = (g64 - w).abs()
        bad = ~(err <= rtol * w.abs() + atol * float(w.abs().max()))   # NaN counts as bad
        if not bad.any():
            continue
        row = int(bad.reshape(w.shape[0], -1).any(1).nonzero()[0])   # first query head that differs
        expected, got_values = (_short(w[row]), _short(g[row])) if w.dim() > 1 else (_short(w), _short(g))
        if w.dim() > 1:
            values = tr("{name}: head {row}: expected {expected}, got {got}", name=name, row=row, expected=expected,
                        got=got_values)
        else:
            values = tr("{name}: expected {expected}, got {got}", name=name, expected=expected, got=got_values)
        if not torch.isfinite(g64).all():
            diffs.append(tr("{values} (not finite: did exp overflow? subtract the running max before "
                            "exponentiating)", values=values))
            continue
        rel = float((err / w.abs().clamp_min(atol * float(w.abs().max()) or 1e-300)).max())
        fields = dict(values=values, abs_error=float(err.max()), rel_error=rel,
                      dtype=str(dtype).removeprefix("torch."), rtol=rtol)
        if dtype == torch.float64 and rel < 1e-5:
            diffs.append(tr("{values}; max abs error {abs_error:.2g}, max rel error {rel_error:.2g} ({dtype} allows "
                            "about {rtol:g}): an error of float32 size, is part of your computation in float32?",
                            **fields))
        else:
            diffs.append(tr("{values}; max abs error {abs_error:.2g}, max rel error {rel_error:.2g} ({dtype} allows "
                            "about {rtol:g})", **fields))
    return diffs


def _short(t: torch.Tensor) -> str:
    values = t.double().flatten().tolist()
    return "[" + ", ".join(f"{x:.6g}" for x in values[:4]) + (", ...]" if len(values) > 4 else "]")


def _run_softmax(fn: Reader, case: SoftmaxCase) -> list[str]:
    scores, values = softmax_case_data(case)
    got_state = initial_state(case.group, case.head_dim, case.dtype)
    want_state = initial_state(case.group, case.head_dim, torch.float64)
    shape = dict(dtype=str(case.dtype).removeprefix("torch."), group=case.group, head_dim=case.head_dim,
                 tiles=list(case.tiles))
    kind = (tr("{dtype}, G = {group} heads, D = {head_dim}, tiles of {tiles} tokens, scores around {base:g}",
               base=case.base, **shape) if case.base else
            tr("{dtype}, G = {group} heads, D = {head_dim}, tiles of {tiles} tokens", **shape))
    for t, (s, v) in enumerate(zip(scores, values)):
        want_state = reference.online_softmax_update(*want_state, s.double(), v.double())
        try:
            got_state = fn(*(x.clone() for x in got_state), s.clone(), v.clone())
        except Raised as exc:
            return [tr("tile {tile} ({kind}): {error}", tile=t + 1, kind=kind, error=exc.args[0])]
        diff = _state_diff(got_state, want_state, case.dtype)
        if diff:   # later tiles start from a wrong state; the first difference is the lesson
            return [tr("after tile {tile} of {tiles} ({kind}):", tile=t + 1, tiles=len(scores), kind=kind)] + \
                [f"  {line}" for line in diff]
    return []


def check_online_softmax_update(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                 tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
) -> bool:
    """Grade ``fn(m, l, acc, scores, v) -> (m, l, acc)``, applied tile by tile.

    After every tile the state must follow the reference's contract (the running max, the sum
    of ``exp(score - m)`` and the unnormalised output against that max), which is what makes
    ``acc / l`` after the last tile equal ``softmax(all scores) @ all values``, in the dtype of
    the state it is given.
    """
    return grade("online_softmax_update（線上 softmax 更新）", fn, SOFTMAX_CASES, HIDDEN_SOFTMAX_CASES, _run_softmax)


# --- warm-up Triton puzzles ---------------------------------------------------------------------------
# Four small kernels, each meeting one idea of the paged kernel: program ids and a masked load with other=,
# a gather through an index tensor, a row-wise reduction, and tl.dot. Each grader launches the reader's
# kernel in the interpreter (compiled on a GPU) with outputs poisoned with NaN and NaN past every
# valid input, and a masked load without other= reading NaN (ch4_triton.watched_loads). A try_* helper runs
# one case made of its arguments through the grader's own code: inputs, outputs, expected, and its problems.

from .. import runtime  # noqa: E402
from .ch4_triton import Case, Forbidden, _capture, _dot_floor, _first_mismatch, _launch, _try  # noqa: E402


def _pad_copy_cases() -> list[Case]:
    cases = [Case(tr("10 values, blocks of 4, 3 programs (the last block is ragged)"), dict(n=10, block=4, programs=3)),
             Case(tr("8 values, one block of 8 (nothing to mask)"), dict(n=8, block=8, programs=1)),
             Case(tr("1 value, blocks of 4, 2 programs (the second program has nothing to copy)"),
                  dict(n=1, block=4, programs=2))]
    rng = random.Random(41)
    for i in range(3):
        block = rng.choice((2, 4, 8, 16))
        n = rng.randint(1, 40)
        cases.append(Case(tr("hidden case {n} (seeded random): {count} values, blocks of {block}", n=i + 1, count=n,
                             block=block),
                          dict(n=n, block=block, programs=-(-n // block) + rng.randint(0, 1), seed=i)))
    return cases


def _pad_copy_inputs(p: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(p.get("seed", 0) + 7)
    total = p["programs"] * p["block"]
    x = torch.full((total + p["block"],), float("nan"))      # NaN past the n values
    x[: p["n"]] = torch.randn(p["n"], generator=gen)
    expected = torch.zeros(total)
    expected[: p["n"]] = x[: p["n"]]
    return x.to(runtime.device()), torch.full((total,), float("nan"), device=runtime.device()), expected


def try_pad_copy(kernel: object, n: int = 10, block: int = 4, programs: int = 3) -> dict:
    """Run ``kernel[(programs,)](x, out, n, BLOCK=block)`` once; return x, out, the expected out, the problems."""
    return _try(_run_pad_copy, kernel, [Case(tr("the given arguments"), dict(n=n, block=block, programs=programs))],
                0)


def _run_pad_copy(kernel: object, case: Case) -> list[str]:
    p = case.params
    x, out, expected = _pad_copy_inputs(p)
    error = _launch(lambda: kernel[(p["programs"],)](x, out, p["n"], BLOCK=p["block"]))
    _capture(x=x[:p["n"]].cpu(), out=out.cpu(), expected=expected)
    if error:
        return [error]
    got = out.cpu()
    bad = ~((got == expected) | (torch.isnan(got) & torch.isnan(expected)))
    if not bool(bad.any()):
        return []
    i = int(bad.nonzero()[0])
    lines = [tr("out[{i}] (program {program}, lane {lane}): expected {expected:.4g}, got {got:.4g}", i=i,
                program=i // p["block"], lane=i % p["block"], expected=float(expected[i]), got=float(got[i]))]
    if math.isnan(float(got[i])) and i >= p["n"]:
        lines.append(tr("hint: position {i} is past the n = {n} values, where x holds NaN here: load with "
                        "mask=offs < n and other=0.0, and store the whole block", i=i, n=p["n"]))
    elif math.isnan(float(got[i])):
        lines.append(tr("hint: nothing was stored at {i}: program pid covers pid * BLOCK .. pid * BLOCK + BLOCK - 1 "
                        "(offs = pid * BLOCK + tl.arange(0, BLOCK))", i=i))
    return lines


def check_pad_copy(kernel: object) -> bool:
    """Puzzle 1: ``out[i] = x[i]`` for ``i < n``, 0 for the rest of the last block; grid (programs,)."""
    return grade_in_order("pad_copy（帶遮罩的載入）", _pad_copy_cases(), lambda case: _run_pad_copy(kernel, case))


def _gather_cases() -> list[Case]:
    cases = [Case(tr("5 rows gathered by index [3, 0, 3, 6, 1] from 7, head_dim 4, blocks of 4 rows"),
                  dict(rows=7, idx=[3, 0, 3, 6, 1], dim=4, block=4)),
             Case(tr("one row"), dict(rows=3, idx=[2], dim=8, block=2))]
    rng = random.Random(42)
    for i in range(3):
        rows, n = rng.randint(2, 9), rng.randint(1, 11)
        cases.append(Case(tr("hidden case {n} (seeded random): {count} indices into {rows} rows", n=i + 1, count=n,
                             rows=rows),
                          dict(rows=rows, idx=[rng.randrange(rows) for _ in range(n)], dim=rng.choice((2, 4, 8)),
                               block=rng.choice((2, 4, 8)), seed=i)))
    return cases


def _gather_inputs(p: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(p.get("seed", 0) + 11)
    device = runtime.device()
    n, block, guard = len(p["idx"]), p["block"], p["rows"]
    src = torch.full((p["rows"] + 1, p["dim"]), float("nan"))   # the last row is a NaN guard
    src[: p["rows"]] = torch.randn(p["rows"], p["dim"], generator=gen)
    width = -(-n // block) * block + block
    idx = torch.full((width,), guard, dtype=torch.int32)         # past n: the guard row
    idx[:n] = torch.tensor(p["idx"], dtype=torch.int32)
    out = torch.full((width, p["dim"]), float("nan"))
    return src.to(device), idx.to(device), out.to(device), src[idx[:n].long()]


def try_gather_rows(kernel: object, idx: tuple[int, ...] = (3, 0, 3, 6, 1), rows: int = 7, dim: int = 4,
                    block: int = 4) -> dict:
    """Run ``kernel[(cdiv(n, block),)](src, idx, out, n, D=dim, BLOCK_N=block)`` once; return src, idx, out."""
    case = Case(tr("the given arguments"), dict(rows=rows, idx=list(idx), dim=dim, block=block))
    return _try(_run_gather, kernel, [case], 0)


def _run_gather(kernel: object, case: Case) -> list[str]:
    p = case.params
    src, idx, out, expected = _gather_inputs(p)
    n = len(p["idx"])
    item = idx.element_size()
    reads: list[str] = []
    forbidden = (Forbidden(idx.data_ptr() + n * item, idx.data_ptr() + idx.numel() * item, "idx", item, idx.data_ptr()),)
    error = _launch(lambda: kernel[(-(-n // p["block"]),)](src, idx, out, n, D=p["dim"], BLOCK_N=p["block"]),
                    reads, forbidden)
    _capture(src=src[:p["rows"]].cpu(), idx=list(p["idx"]), out=out[:n].cpu(), expected=expected)
    if error:
        return [error]
    got = out.cpu()
    for i in range(n):
        if not torch.equal(got[i], expected[i]):
            hits = [r for r in range(p["rows"]) if torch.equal(got[i], src.cpu()[r])]
            what = tr("row {row} of src", row=hits[0]) if hits else (
                tr("NaN (nothing stored)") if bool(torch.isnan(got[i]).all()) else tr("no row of src"))
            return [tr("out row {i}: idx[{i}] = {index}, so expected src row {index}; got {what}", i=i,
                       index=p["idx"][i], what=what)]
    if bool((~torch.isnan(got[n:])).any()):
        row = n + int((~torch.isnan(got[n:])).any(1).nonzero()[0])
        return [tr("out row {row} was written, but there are only n = {n} indices: mask the store (rows >= n)",
                   row=row, n=n)]
    if reads:
        return [tr("the rows are right, but a load whose lanes were not masked read {read} (past n = {n}): "
                   "mask the index load with rows < n (on a GPU the index tensor may end there)", read=reads[0], n=n)]
    return []


def check_gather_rows(kernel: object) -> bool:
    """Puzzle 2: ``out[i, :] = src[idx[i], :]`` for ``i < n``; grid (cdiv(n, BLOCK_N),)."""
    return grade_in_order("gather_rows（經由索引收集）", _gather_cases(), lambda case: _run_gather(kernel, case))


def _stats_cases() -> list[Case]:
    cases = [Case(tr("3 rows of lengths 5, 1 and 8 in blocks of 8"), dict(lens=[5, 1, 8], block=8)),
             Case(tr("every value negative: the max is not 0"), dict(lens=[3, 6], block=8, shift=-50.0)),
             Case(tr("values near 100: exp overflows float32 without subtracting the max"),
                  dict(lens=[4, 7], block=8, shift=100.0))]
    rng = random.Random(43)
    for i in range(3):
        block = rng.choice((4, 8, 16))
        cases.append(Case(tr("hidden case {n} (seeded random): blocks of {block}", n=i + 1, block=block),
                          dict(lens=[rng.randint(1, block) for _ in range(rng.randint(1, 4))], block=block,
                               shift=rng.choice((0.0, -30.0, 60.0)), seed=i)))
    return cases


def _stats_inputs(p: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                    torch.Tensor]:
    gen = torch.Generator().manual_seed(p.get("seed", 0) + 13)
    device = runtime.device()
    rows, block = len(p["lens"]), p["block"]
    x = torch.full((rows, block + 3), float("nan"))   # NaN past each row's length
    for r, n in enumerate(p["lens"]):
        x[r, :n] = torch.randn(n, generator=gen) * 3 + p.get("shift", 0.0)
    want_max = torch.stack([x[r, :n].double().max() for r, n in enumerate(p["lens"])])
    want_sum = torch.stack([torch.exp(x[r, :n].double() - want_max[r]).sum() for r, n in enumerate(p["lens"])])
    lens = torch.tensor(p["lens"], dtype=torch.int32)
    nan = torch.full((rows,), float("nan"))
    return x.to(device), lens.to(device), nan.clone().to(device), nan.clone().to(device), want_max, want_sum


def try_row_stats(kernel: object, lens: tuple[int, ...] = (5, 1, 8), block: int = 8) -> dict:
    """Run ``kernel[(rows,)](x, lengths, row_max, row_sum, x.stride(0), BLOCK=block)`` once."""
    return _try(_run_stats, kernel, [Case(tr("the given arguments"), dict(lens=list(lens), block=block))], 0)


def _run_stats(kernel: object, case: Case) -> list[str]:
    p = case.params
    x, lengths, mx, sm, want_max, want_sum = _stats_inputs(p)
    error = _launch(lambda: kernel[(len(p["lens"]),)](x, lengths, mx, sm, x.stride(0), BLOCK=p["block"]))
    _capture(x=[x[r, :n].cpu() for r, n in enumerate(p["lens"])], row_max=mx.cpu(), row_sum=sm.cpu(),
             expected_max=want_max.float(), expected_sum=want_sum.float())
    if error:
        return [error]
    for name, got, want in (("row_max", mx.cpu().double(), want_max), ("row_sum", sm.cpu().double(), want_sum)):
        bad = _first_mismatch(got, want, 1e-5, 1e-6)
        if bad is not None:
            (r,) = bad
            lines = [tr("{name}[{r}] (a row of {count} values in a block of {block}): expected {expected:.6g}, "
                        "got {got:.6g}", name=name, r=r, count=p["lens"][r], block=p["block"],
                        expected=float(want[r]), got=float(got[r]))]
            if name == "row_max" and float(got[r]) == 0.0 and float(want[r]) < 0:
                lines.append(tr("hint: the masked lanes read 0, which is larger than every value here: load with "
                                "other=-float('inf') so padding never wins the max"))
            elif not math.isfinite(float(got[r])):
                lines.append(tr("hint: inf or NaN: subtract the row's max before exp, and give the masked lanes a "
                                "value that adds nothing (other=-inf: exp(-inf) = 0)"))
            return lines
    return []


def check_row_stats(kernel: object) -> bool:
    """Puzzle 3: per row, the max of its first ``lengths[r]`` values and the sum of exp(x - max); grid (rows,)."""
    return grade_in_order("row_stats（逐列歸約）", _stats_cases(), lambda case: _run_stats(kernel, case))


def _scores_cases() -> list[Case]:
    cases = [Case(tr("4 query heads, 5 keys in a block of 8, head_dim 8"), dict(g=4, n=5, d=8, block=8)),
             Case(tr("1 query head, 8 keys (nothing masked), head_dim 4"), dict(g=1, n=8, d=4, block=8))]
    rng = random.Random(44)
    for i in range(3):
        block = rng.choice((4, 8, 16))
        cases.append(Case(tr("hidden case {n} (seeded random): keys in a block of {block}", n=i + 1, block=block),
                          dict(g=rng.choice((1, 2, 4)), n=rng.randint(1, block), d=rng.choice((2, 4, 8)), block=block,
                               seed=i)))
    return cases


def _scores_inputs(p: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float, dict]:
    floor = _dot_floor()
    g, d, block = max(p["g"], floor), max(p["d"], floor), max(p["block"], floor)
    gen = torch.Generator().manual_seed(p.get("seed", 0) + 17)
    device = runtime.device()
    q = torch.randn(g, d, generator=gen)
    k = torch.full((block, d), float("nan"))   # NaN past the n keys
    k[: p["n"]] = torch.randn(p["n"], d, generator=gen)
    scale = d ** -0.5
    want = torch.full((g, block), float("-inf"), dtype=torch.float64)
    want[:, : p["n"]] = q.double() @ k[: p["n"]].double().T * scale
    out = torch.full((g, block), float("nan"))
    return q.to(device), k.to(device), out.to(device), want, scale, dict(G=g, D=d, BLOCK_N=block)


def try_scores(kernel: object, g: int = 4, n: int = 5, d: int = 8, block: int = 8) -> dict:
    """Run ``kernel[(1,)](q, k, out, n, scale, G=g, D=d, BLOCK_N=block)`` once; return q, k, out and expected."""
    return _try(_run_scores, kernel, [Case(tr("the given arguments"), dict(g=g, n=n, d=d, block=block))], 0)


def _run_scores(kernel: object, case: Case) -> list[str]:
    p = case.params
    q, k, out, want, scale, meta = _scores_inputs(p)
    error = _launch(lambda: kernel[(1,)](q, k, out, p["n"], scale, **meta))
    _capture(q=q.cpu(), k=k[:p["n"]].cpu(), scale=scale, out=out.cpu(), expected=want.float())
    if error:
        return [error]
    got = out.cpu().double()
    bad = _first_mismatch(got, want, 1e-5, 1e-5)
    if bad is None:
        return []
    gi, j = bad
    lines = [tr("out[{g}, {j}] (query head {g}, key {j} of n = {n}): expected {expected:.5g}, got {got:.5g}", g=gi,
                j=j, n=p["n"], expected=float(want[gi, j]), got=float(got[gi, j]))]
    if j >= p["n"]:
        lines.append(tr("hint: keys past n are padding: their score must be -inf (tl.where(offs_n < n, s, "
                        "float('-inf'))), so a softmax gives them weight 0"))
    elif bool(torch.isclose(got[gi, j], want[gi, j] / scale, rtol=1e-5)):
        lines.append(tr("hint: multiply q·k by scale"))
    return lines


def check_scores(kernel: object) -> bool:
    """Puzzle 4: ``out[g, j] = scale * q[g]·k[j]`` for keys ``j < n``, -inf after; one program, tl.dot."""
    return grade_in_order("scores（以 tl.dot 計算分數）", _scores_cases(), lambda case: _run_scores(kernel, case))
