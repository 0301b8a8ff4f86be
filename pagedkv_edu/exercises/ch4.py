"""Graders for chapter 4's first steps: the online-softmax update in PyTorch, and four warm-up
Triton puzzles.

``check_online_softmax_update`` replays the reader's update tile by tile and names the first
tile, and the first quantity (running max, running sum or accumulator), that leaves the
contract, with the dtype and the size of the error; one case has scores near 1,000, where a
softmax without the running max overflows, and one a tile of only padding (-inf), where a
tile-local max gives NaN. Hidden cases vary the tile widths (odd ones included), the number
of heads, and run in float32 as well as float64.

Each ``check_*`` prints its verdict (:mod:`.grading`) and returns it as a bool.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .grading import Raised, Reader, grade, short
from .solutions import ch4 as reference


# --- online softmax ----------------------------------------------------------------

@dataclass(frozen=True)
class SoftmaxCase:
    name: str
    tiles: tuple[int, ...]  # tokens per tile
    offset_per_tile: float  # tile t's scores are centred on base + t * offset: positive = the max keeps growing
    base: float = 0.0
    mask_last: bool = False  # the last tile's final tokens are padding (-inf), as in a kernel's ragged tile
    group: int = 3           # query heads sharing the KV head (G)
    head_dim: int = 4
    seed: int = 0
    dtype: torch.dtype = torch.float64   # of the scores, the values and the running state


SOFTMAX_CASES: tuple[SoftmaxCase, ...] = (
    SoftmaxCase("random scores, four tiles of 8", (8, 8, 8, 8), 0.0),
    SoftmaxCase("the max grows every tile (old sums must be rescaled)", (4, 4, 4), 3.0),
    SoftmaxCase("the max shrinks after the first tile", (4, 4, 4), -3.0),
    SoftmaxCase("scores near 1,000 (exp overflows without the running max)", (4, 4), 5.0, base=1000.0),
    SoftmaxCase("a ragged last tile padded with -inf", (8, 8, 8), 0.0, mask_last=True),
    SoftmaxCase("one tile", (16,), 0.0),
    SoftmaxCase("a last tile of only padding (-inf): a tile-local max gives NaN", (4, 4, 1), 0.0, mask_last=True),
)

# Relative and (relative to the largest value) absolute tolerance of each dtype's state.
TOLERANCE = {torch.float64: (1e-9, 1e-12), torch.float32: (1e-4, 1e-6)}


def _hidden_softmax_cases(count: int = 40, seed: int = 5) -> list[SoftmaxCase]:
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        tiles = tuple(rng.choice((1, 2, 3, 5, 6, 7, 8, 12, 16)) for _ in range(rng.randint(1, 4)))
        dtype = (torch.float64, torch.float32)[i % 2]
        case = SoftmaxCase(f"hidden case {i + 1}", tiles, rng.uniform(-4, 4), rng.choice((0.0, 0.0, -30.0, 50.0, 1000.0)),
                           rng.random() < 0.3, rng.randint(1, 4), rng.randint(1, 6), seed * 1000 + i, dtype)
        cases.append(case)
    return cases


HIDDEN_SOFTMAX_CASES = _hidden_softmax_cases()


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


_QUANTITIES = ("m (running max)", "l (running sum)", "acc (running output)")


def _state_diff(got: object, want: tuple[torch.Tensor, ...], dtype: torch.dtype) -> list[str]:
    """What is wrong with the returned state: its form, its dtype, or its values and by how much."""
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return [f"expected a tuple (m, l, acc), got {short(got)}"]
    rtol, atol = TOLERANCE[dtype]
    diffs = []
    dtypes = {g.dtype for g in got if isinstance(g, torch.Tensor)}
    if len(dtypes) == 1 and dtype not in dtypes and all(isinstance(g, torch.Tensor) for g in got):
        return [f"dtype: m, l and acc are {dtypes.pop()}, but the state and the inputs are {dtype}: "
                f"keep the state in the dtype it was given"]
    for name, g, w in zip(_QUANTITIES, got, want):
        if not isinstance(g, torch.Tensor) or g.shape != w.shape:
            shape = tuple(g.shape) if isinstance(g, torch.Tensor) else short(g)
            diffs.append(f"{name}: expected shape {tuple(w.shape)}, got {shape}")
            continue
        if g.dtype != dtype:
            diffs.append(f"{name}: dtype {g.dtype}, but the state and the inputs are {dtype}: "
                         f"keep the state in the dtype it was given")
            continue
        g64 = g.double()
        err = (g64 - w).abs()
        bad = ~(err <= rtol * w.abs() + atol * float(w.abs().max()))   # NaN counts as bad
        if not bad.any():
            continue
        row = int(bad.reshape(w.shape[0], -1).any(1).nonzero()[0])   # first query head that differs
        where = f"head {row}: " if w.dim() > 1 else ""
        line = (f"{name}: {where}expected {_short(w[row] if w.dim() > 1 else w)}, "
                f"got {_short(g[row] if w.dim() > 1 else g)}")
        if not torch.isfinite(g64).all():
            line += " (not finite: did exp overflow? subtract the running max before exponentiating)"
        else:
            rel = float((err / w.abs().clamp_min(atol * float(w.abs().max()) or 1e-300)).max())
            line += (f"; max abs error {float(err.max()):.2g}, max rel error {rel:.2g} "
                     f"({str(dtype).removeprefix('torch.')} allows about {rtol:g})")
            if dtype == torch.float64 and rel < 1e-5:
                line += ": an error of float32 size, is part of your computation in float32?"
        diffs.append(line)
    return diffs


def _short(t: torch.Tensor) -> str:
    values = t.double().flatten().tolist()
    return "[" + ", ".join(f"{x:.6g}" for x in values[:4]) + (", ...]" if len(values) > 4 else "]")


def _run_softmax(fn: Reader, case: SoftmaxCase) -> list[str]:
    scores, values = softmax_case_data(case)
    got_state = initial_state(case.group, case.head_dim, case.dtype)
    want_state = initial_state(case.group, case.head_dim, torch.float64)
    kind = (f"{str(case.dtype).removeprefix('torch.')}, G = {case.group} heads, D = {case.head_dim}, "
            f"tiles of {list(case.tiles)} tokens" + (f", scores around {case.base:g}" if case.base else ""))
    for t, (s, v) in enumerate(zip(scores, values)):
        want_state = reference.online_softmax_update(*want_state, s.double(), v.double())
        try:
            got_state = fn(*(x.clone() for x in got_state), s.clone(), v.clone())
        except Raised as exc:
            return [f"tile {t + 1} ({kind}): {exc}"]
        diff = _state_diff(got_state, want_state, case.dtype)
        if diff:   # later tiles start from a wrong state; the first difference is the lesson
            return [f"after tile {t + 1} of {len(scores)} ({kind}):"] + ["  " + line for line in diff]
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
    return grade("online_softmax_update", fn, SOFTMAX_CASES, HIDDEN_SOFTMAX_CASES, _run_softmax)
