"""Graders for chapters 3 and 4: gathering a sequence out of the paged cache, and online softmax.

``check_gather_kv`` fills every cache slot with its own slot number, so a wrong row says
where it came from: "position 17 holds slot 23 (block 1, offset 7), a block this sequence
does not own" is exactly the message a block-table bug needs. ``check_online_softmax_update``
replays the reader's update tile by tile and names the first tile, and the first quantity
(running max, running sum or accumulator), that leaves the contract; one case has scores near
1,000, where a softmax without the running max overflows.

Each ``check_*`` prints pass or fail with a diff and returns a bool.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from . import report
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


GATHER_CASES: tuple[GatherCase, ...] = (
    GatherCase("the block-table article: 9 tokens in blocks [7, 1, 3], block size 4", 8, 4, (7, 1, 3), 9),
    GatherCase("a full last block: 8 tokens in [5, 2], block size 4", 8, 4, (5, 2), 8),
    GatherCase("one token", 6, 16, (4,), 1),
    GatherCase("block size 1: [3, 0, 2]", 5, 1, (3, 0, 2), 3),
    GatherCase("a table longer than the sequence ([6, 0, -1, -1]: unused entries)", 8, 8, (6, 0, -1, -1), 11),
)


def slot_numbered_cache(num_blocks: int, block_size: int, num_kv_heads: int = 2, head_dim: int = 3) -> torch.Tensor:
    """A float64 cache whose every element of slot s is s + (head, dim) / 1000: rows name their slot."""
    slots = torch.arange(num_blocks * block_size, dtype=torch.float64)
    fraction = torch.arange(num_kv_heads * head_dim, dtype=torch.float64).view(num_kv_heads, head_dim) / 1000
    return (slots[:, None, None] + fraction).view(num_blocks, block_size, num_kv_heads, head_dim)


def _describe_row(row: torch.Tensor, case: GatherCase) -> str:
    """Which slot a (wrong) gathered row came from, read off the slot-numbered cache."""
    slot = float(row.flatten()[0])
    if not math.isfinite(slot) or slot != int(slot):
        return f"a row that is not any slot's (first value {slot})"
    block, offset = divmod(int(slot), case.block_size)
    owned = case.block_table[: -(-case.seq_len // case.block_size)]
    mine = "" if block in owned else ", a block this sequence does not own"
    return f"slot {int(slot)} (block {block}, offset {offset}{mine})"


def check_gather_kv(fn: Callable[[torch.Tensor, Sequence[int], int], torch.Tensor]) -> bool:
    """Grade ``fn(cache, block_table, seq_len) -> [seq_len, num_kv_heads, head_dim]``."""
    failures: list[str] = []
    for case in GATHER_CASES:
        cache = slot_numbered_cache(case.num_blocks, case.block_size)
        expected = reference.gather_kv(cache, case.block_table, case.seq_len)
        try:
            got = fn(cache.clone(), list(case.block_table), case.seq_len)
        except Exception as exc:  # the reader's code may raise anything; report it, don't crash
            failures.append(f"{case.name}: raised {type(exc).__name__}: {exc}")
            break
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            failures.append(f"{case.name}: expected shape {tuple(expected.shape)}, got {shape}")
            continue
        wrong = [p for p in range(case.seq_len) if not torch.equal(got[p].to(expected.dtype), expected[p])]
        if wrong and failures:
            failures.append(f"also wrong: {case.name} ({len(wrong)} of {case.seq_len} positions)")
        elif wrong:
            failures.append(f"{case.name}: {len(wrong)} of {case.seq_len} positions wrong")
            for p in wrong[:MAX_SHOWN]:
                failures.append(f"  position {p}: expected {_describe_row(expected[p], case)}, "
                                f"got {_describe_row(got[p], case)}")
            if len(wrong) > MAX_SHOWN:
                failures.append(f"  ... and {len(wrong) - MAX_SHOWN} more")
    return report("gather_kv", failures)


# --- chapter 4: online softmax ----------------------------------------------------------------

@dataclass(frozen=True)
class SoftmaxCase:
    name: str
    tiles: tuple[int, ...]  # tokens per tile
    offset_per_tile: float  # tile t's scores are centred on base + t * offset: positive = the max keeps growing
    base: float = 0.0
    mask_last: bool = False  # the last tile's final tokens are padding (-inf), as in a kernel's ragged tile


SOFTMAX_CASES: tuple[SoftmaxCase, ...] = (
    SoftmaxCase("random scores, four tiles of 8", (8, 8, 8, 8), 0.0),
    SoftmaxCase("the max grows every tile (old sums must be rescaled)", (4, 4, 4), 3.0),
    SoftmaxCase("the max shrinks after the first tile", (4, 4, 4), -3.0),
    SoftmaxCase("scores near 1,000 (exp overflows without the running max)", (4, 4), 5.0, base=1000.0),
    SoftmaxCase("a ragged last tile padded with -inf", (8, 8, 8), 0.0, mask_last=True),
    SoftmaxCase("one tile", (16,), 0.0),
)


def softmax_case_data(case: SoftmaxCase, group: int = 3, head_dim: int = 4,
                      seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The case's per-tile float64 scores [group, T] and values [T, head_dim]."""
    gen = torch.Generator().manual_seed(seed)
    scores, values = [], []
    for t, n in enumerate(case.tiles):
        s = torch.randn(group, n, generator=gen, dtype=torch.float64) + case.base + t * case.offset_per_tile
        if case.mask_last and t == len(case.tiles) - 1:
            s[:, n // 2:] = float("-inf")
        scores.append(s)
        values.append(torch.randn(n, head_dim, generator=gen, dtype=torch.float64))
    return scores, values


def initial_state(group: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Before any tile: max -inf, sum 0, accumulator 0."""
    return (torch.full((group,), float("-inf"), dtype=torch.float64), torch.zeros(group, dtype=torch.float64),
            torch.zeros(group, head_dim, dtype=torch.float64))


def _state_diff(got: object, want: tuple[torch.Tensor, ...]) -> list[str]:
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return [f"expected a tuple (m, l, acc), got {type(got).__name__}"]
    diffs = []
    for name, g, w in zip(("m (running max)", "l (running sum)", "acc (running output)"), got, want):
        if not isinstance(g, torch.Tensor) or g.shape != w.shape:
            shape = tuple(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__
            diffs.append(f"{name}: expected shape {tuple(w.shape)}, got {shape}")
            continue
        close = torch.isclose(g.double(), w, rtol=1e-9, atol=1e-12)
        if not close.all():
            row = int((~close).reshape(w.shape[0], -1).any(1).nonzero()[0])  # first query head that differs
            where = f"head {row}: " if w.dim() > 1 else ""
            diffs.append(f"{name}: {where}expected {_short(w[row] if w.dim() > 1 else w)}, "
                         f"got {_short(g[row] if w.dim() > 1 else g)}")
    return diffs


def _short(t: torch.Tensor) -> str:
    values = t.double().flatten().tolist()
    return "[" + ", ".join(f"{x:.4g}" for x in values[:4]) + (", ...]" if len(values) > 4 else "]")


def check_online_softmax_update(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                 tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
) -> bool:
    """Grade ``fn(m, l, acc, scores, v) -> (m, l, acc)``, applied tile by tile.

    After every tile the state must follow the reference's contract (the running max, the sum
    of ``exp(score - m)`` and the unnormalised output against that max), which is what makes
    ``acc / l`` after the last tile equal ``softmax(all scores) @ all values``.
    """
    failures: list[str] = []
    for case in SOFTMAX_CASES:
        scores, values = softmax_case_data(case)
        got_state = want_state = initial_state(scores[0].shape[0], values[0].shape[1])
        for t, (s, v) in enumerate(zip(scores, values)):
            want_state = reference.online_softmax_update(*want_state, s, v)
            try:
                got_state = fn(*(x.clone() for x in got_state), s.clone(), v.clone())
            except Exception as exc:  # the reader's exception is the diff
                failures.append(f"{case.name}: tile {t + 1}: raised {type(exc).__name__}: {exc}")
                return report("online_softmax_update", failures)
            diff = _state_diff(got_state, want_state)
            if diff and failures:  # the first failing case is shown in full, later ones in a line
                failures.append(f"also wrong: {case.name} (from tile {t + 1})")
                break
            if diff:
                failures.append(f"{case.name}: after tile {t + 1} of {len(scores)}:")
                failures += ["  " + line for line in diff]
                break  # later tiles start from a wrong state; the first difference is the lesson
    return report("online_softmax_update", failures)
