"""Graders for chapters 3 and 4: gathering a sequence out of the paged cache, and online softmax.

``check_gather_kv`` fills every cache slot of the chapter's cases with its own slot number, so a
wrong row says where it came from: "position 17 holds slot 23 (block 1, offset 7), a block this
sequence does not own" is exactly the message a block-table bug needs. Its hidden cases use
random caches in float64, float32, float16 and bfloat16, block sizes that are not powers of two,
and lengths 0, 1 and exact multiples of the block size; a wrong row is still traced to its slot
(by looking it up), and a result in another dtype than the cache's is named as such.

``check_online_softmax_update`` replays the reader's update tile by tile and names the first
tile, and the first quantity (running max, running sum or accumulator), that leaves the
contract, with the dtype and the size of the error; one case has scores near 1,000, where a
softmax without the running max overflows. Hidden cases vary the tile widths (odd ones
included), the number of heads, and run in float32 as well as float64.

Each ``check_*`` prints its verdict (:mod:`.grading`) and returns it as a bool.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .ch2 import HIDDEN_BLOCK_SIZES, diagnose_slots, random_table
from .grading import Raised, Reader, grade, short
from .solutions import ch3_4 as reference

MAX_SHOWN = 4  # wrong positions printed per failing case


# --- chapter 3: gather ----------------------------------------------------------------------

@dataclass(frozen=True)
class GatherCase:
    name: str
    num_blocks: int
    block_size: int
    block_table: tuple[int, ...]
    seq_len: int
    dtype: torch.dtype = torch.float64
    num_kv_heads: int = 2
    head_dim: int = 3
    seed: int | None = None   # None: the slot-numbered cache; else a random one from this seed


GATHER_CASES: tuple[GatherCase, ...] = (
    GatherCase("the block-table article: 9 tokens in blocks [7, 1, 3], block size 4", 8, 4, (7, 1, 3), 9),
    GatherCase("a full last block: 8 tokens in [5, 2], block size 4", 8, 4, (5, 2), 8),
    GatherCase("one token", 6, 16, (4,), 1),
    GatherCase("block size 1: [3, 0, 2]", 5, 1, (3, 0, 2), 3),
    GatherCase("a table longer than the sequence ([6, 0, -1, -1]: unused entries)", 8, 8, (6, 0, -1, -1), 11),
)

CACHE_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def _hidden_gather_cases(count: int = 60, seed: int = 4) -> list[GatherCase]:
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        b = rng.choice(HIDDEN_BLOCK_SIZES)
        used = rng.randint(0, 4)
        seq_len = 0 if used == 0 else rng.choice([used * b, (used - 1) * b + 1, rng.randint((used - 1) * b + 1, used * b)])
        num_blocks = used + rng.randint(1, 6)
        table = random_table(rng, num_blocks, used) + rng.choice([[], [-1], [-1, -1]])
        dtype = CACHE_DTYPES[i % len(CACHE_DTYPES)]
        cases.append(GatherCase(
            f"hidden case {i + 1}: {seq_len} tokens in table {table}, block size {b}, "
            f"{num_blocks} blocks, {str(dtype).removeprefix('torch.')} cache",
            num_blocks, b, tuple(table), seq_len, dtype, rng.randint(1, 3), rng.randint(2, 5), seed * 1000 + i))
    return cases


HIDDEN_GATHER_CASES = _hidden_gather_cases()


def slot_numbered_cache(num_blocks: int, block_size: int, num_kv_heads: int = 2, head_dim: int = 3) -> torch.Tensor:
    """A float64 cache whose every element of slot s is s + (head, dim) / 1000: rows name their slot."""
    slots = torch.arange(num_blocks * block_size, dtype=torch.float64)
    fraction = torch.arange(num_kv_heads * head_dim, dtype=torch.float64).view(num_kv_heads, head_dim) / 1000
    return (slots[:, None, None] + fraction).view(num_blocks, block_size, num_kv_heads, head_dim)


def case_cache(case: GatherCase) -> torch.Tensor:
    """The cache a case is graded on: slot-numbered, or random in the case's dtype."""
    if case.seed is None:
        return slot_numbered_cache(case.num_blocks, case.block_size, case.num_kv_heads, case.head_dim)
    gen = torch.Generator().manual_seed(case.seed)
    shape = (case.num_blocks, case.block_size, case.num_kv_heads, case.head_dim)
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(case.dtype)


def _slot_of(row: torch.Tensor, flat: torch.Tensor) -> int | None:
    """Which cache slot holds exactly this row, if any."""
    if row.shape != flat.shape[1:]:
        return None
    hits = (flat == row.to(flat.dtype)).flatten(1).all(1).nonzero()
    return int(hits[0]) if len(hits) else None


def _describe_slot(slot: int | None, row: torch.Tensor, case: GatherCase) -> str:
    if slot is None:
        first = float(row.flatten()[0]) if row.numel() else math.nan
        return f"a row that is not any slot's (first value {first:.4g})"
    block, offset = divmod(slot, case.block_size)
    owned = case.block_table[: -(-case.seq_len // case.block_size)]
    mine = "" if block in owned else ", a block this sequence does not own"
    return f"slot {slot} (block {block}, offset {offset}{mine})"


def _run_gather(fn: Reader, case: GatherCase) -> list[str]:
    cache = case_cache(case)
    expected = reference.gather_kv(cache, case.block_table, case.seq_len)
    try:
        got = fn(cache.clone(), list(case.block_table), case.seq_len)
    except Raised as exc:
        hint = ""
        if case.seq_len == 0:
            hint = " (the sequence is empty: the answer is a tensor with 0 rows)"
        elif isinstance(exc.error, IndexError):
            hint = (f" (the cache holds {case.num_blocks * case.block_size} slots: {case.num_blocks} blocks, and the "
                    f"block size here is {case.block_size}, cache.shape[1])")
        return [str(exc) + hint]
    if not isinstance(got, torch.Tensor):
        return [f"expected a tensor of shape {tuple(expected.shape)}, got {short(got)}"]
    if got.shape != expected.shape:
        line = f"expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
        if got.dim() == 3 and got.shape[0] == -(-case.seq_len // case.block_size) * case.block_size:
            line += " (whole blocks: the empty tail of the last block is not part of the sequence)"
        return [line]
    if got.dtype != cache.dtype:
        same = torch.equal(got, expected.to(got.dtype))
        return [f"dtype: the cache is {cache.dtype} but the result is {got.dtype}. A gather copies rows, it "
                f"does not convert them: create the result with dtype=cache.dtype, or index the cache"
                + (" (the rows are the right ones otherwise)" if same else "")]
    wrong = [p for p in range(case.seq_len) if not torch.equal(got[p], expected[p])]
    if not wrong:
        return []
    flat = cache.reshape(-1, case.num_kv_heads, case.head_dim)
    slots = [_slot_of(got[p], flat) for p in range(case.seq_len)]
    lines = []
    if all(s is not None for s in slots):
        cause = diagnose_slots(case.block_table, case.block_size, range(case.seq_len), slots)
        lines += [cause] if cause else []
    lines.append(f"{len(wrong)} of {case.seq_len} positions wrong")
    for p in wrong[:MAX_SHOWN]:
        lines.append(f"  position {p}: expected {_describe_slot(_slot_of(expected[p], flat), expected[p], case)}, "
                     f"got {_describe_slot(slots[p], got[p], case)}")
    if len(wrong) > MAX_SHOWN:
        lines.append(f"  ... and {len(wrong) - MAX_SHOWN} more")
    return lines


def check_gather_kv(fn: Callable[[torch.Tensor, Sequence[int], int], torch.Tensor]) -> bool:
    """Grade ``fn(cache, block_table, seq_len) -> [seq_len, num_kv_heads, head_dim]`` in the cache's dtype."""
    return grade("gather_kv", fn, GATHER_CASES, HIDDEN_GATHER_CASES, _run_gather)


# --- chapter 4: online softmax ----------------------------------------------------------------

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
