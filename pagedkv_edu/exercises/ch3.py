"""Grader for chapter 3 (paged attention in PyTorch): gathering a sequence out of the paged cache.

The shown cases fill every slot with its own number, so a wrong row says where it came from
("position 17 holds slot 23, a block this sequence does not own"); hidden cases use random
caches in four dtypes and still trace a wrong row to its slot.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .ch2 import HIDDEN_BLOCK_SIZES, diagnose_slots, edge_length, random_table
from .grading import Raised, Reader, grade, seeded, short
from .solutions import ch3 as reference

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


_HIDDEN_SEED = 4


def _draw_gather_case(rng: random.Random, i: int) -> GatherCase:
    b = rng.choice(HIDDEN_BLOCK_SIZES)
    used = rng.randint(0, 4)
    seq_len = edge_length(rng, used, b)
    num_blocks = used + rng.randint(1, 6)
    table = random_table(rng, num_blocks, used) + rng.choice([[], [-1], [-1, -1]])
    dtype = CACHE_DTYPES[i % len(CACHE_DTYPES)]
    return GatherCase(f"hidden case {i + 1}: {seq_len} tokens in table {table}, block size {b}, "
                      f"{num_blocks} blocks, {str(dtype).removeprefix('torch.')} cache",
                      num_blocks, b, tuple(table), seq_len, dtype, rng.randint(1, 3), rng.randint(2, 5),
                      _HIDDEN_SEED * 1000 + i)


HIDDEN_GATHER_CASES = seeded(60, _HIDDEN_SEED, _draw_gather_case)


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
    return grade("gather_kv（經由區塊表收集 K/V）", fn, GATHER_CASES, HIDDEN_GATHER_CASES, _run_gather)


# --- the reader's gather, as the decoder's attention (chapter 5 and the last chapter) ---------------------

def gather_attention(gather_kv: Callable[[torch.Tensor, Sequence[int], int], torch.Tensor],
                     name: str = "your_gather") -> Callable[..., torch.Tensor]:
    """An attention function (the engine's ``backend``) that gathers each sequence's K/V with the reader's
    ``gather_kv`` and attends causally after its cached prefix: chapter 3's torch attention, in the model.

    What the gather hands back is checked before it is used: its shape and dtype, a sequence at a time.
    """
    from ..attention.reference import prefix_causal_sdpa

    def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
               seq_lens: torch.Tensor, query_start_loc: torch.Tensor, scale: float) -> torch.Tensor:
        out = torch.empty_like(q)
        starts, lens = query_start_loc.tolist(), seq_lens.tolist()
        for s, length in enumerate(lens):
            a, b = starts[s], starts[s + 1]
            if b == a:
                continue
            table = block_tables[s, :-(-length // k_cache.shape[1])].tolist()
            k, v = gather_kv(k_cache, table, length), gather_kv(v_cache, table, length)
            want = (length, *k_cache.shape[2:])
            for what, got in (("K", k), ("V", v)):
                if not isinstance(got, torch.Tensor) or tuple(got.shape) != want or got.dtype != k_cache.dtype:
                    shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
                    raise ValueError(f"your gather_kv (chapter 3) gave sequence {s}'s {what} as {shape}; the engine "
                                     f"needs {want} in {k_cache.dtype}")
            out[a:b] = prefix_causal_sdpa(q[a:b], k, v, scale)
        return out

    attend.__name__ = attend.__qualname__ = name
    return attend
