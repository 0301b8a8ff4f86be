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
from pathlib import Path
from typing import Any

import torch

from ..attention.reference import gather_kv as shipped_gather_kv
from ..attention.reference import prefix_causal_sdpa
from ..engine.guards import PartError
from .ch2 import HIDDEN_BLOCK_SIZES, diagnose_slots, edge_length, random_table
from .grading import Raised, Reader, describe_exception, seeded, short
from .messages import Message, tr
from .my_engine import PARTS, function_in, grade_part
from .solutions import ch3 as reference

GatherFn = Callable[[torch.Tensor, Sequence[int], int], torch.Tensor]
"""A gather: ``gather_kv(cache, block_table, seq_len) -> [seq_len, num_kv_heads, head_dim]`` in the cache's dtype."""

GATHER_NAME = "gather_kv（經由區塊表收集 K/V）"
GATHER_FILE = PARTS["gather"].path()
"""Where chapter 3 saves the reader's gather (``my_engine/gather.py``, relative to the notebooks)."""

MAX_SHOWN = 4  # wrong positions printed per failing case


# --- chapter 3: gather ----------------------------------------------------------------------

@dataclass(frozen=True)
class GatherCase:
    name: Message
    num_blocks: int
    block_size: int
    block_table: tuple[int, ...]
    seq_len: int
    dtype: torch.dtype = torch.float64
    num_kv_heads: int = 2
    head_dim: int = 3
    seed: int | None = None   # None: the slot-numbered cache; else a random one from this seed


GATHER_CASES: tuple[GatherCase, ...] = (
    GatherCase(tr("the block-table article: 9 tokens in blocks [7, 1, 3], block size 4"), 8, 4, (7, 1, 3), 9),
    GatherCase(tr("a full last block: 8 tokens in [5, 2], block size 4"), 8, 4, (5, 2), 8),
    GatherCase(tr("one token"), 6, 16, (4,), 1),
    GatherCase(tr("block size 1: [3, 0, 2]"), 5, 1, (3, 0, 2), 3),
    GatherCase(tr("a table longer than the sequence ([6, 0, -1, -1]: unused entries)"), 8, 8, (6, 0, -1, -1), 11),
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
    return GatherCase(tr("hidden case {n}: {tokens} tokens in table {table}, block size {block_size}, {blocks} blocks, "
                         "{dtype} cache", n=i + 1, tokens=seq_len, table=table, block_size=b, blocks=num_blocks,
                         dtype=str(dtype).removeprefix("torch.")),
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


def _describe_slot(slot: int | None, row: torch.Tensor, block_size: int, owned: Sequence[int]) -> Message:
    """``slot 23 (block 5, offset 3, a block this sequence does not own)``: where a row came from."""
    if slot is None:
        first = float(row.flatten()[0]) if row.numel() else math.nan
        return tr("a row that is not any slot's (first value {first:.4g})", first=first)
    block, offset = divmod(slot, block_size)
    if block in owned:
        return tr("slot {slot} (block {block}, offset {offset})", slot=slot, block=block, offset=offset)
    return tr("slot {slot} (block {block}, offset {offset}, a block this sequence does not own)", slot=slot,
              block=block, offset=offset)


def _run_gather(fn: Reader, case: GatherCase) -> list[str]:
    cache = case_cache(case)
    expected = reference.gather_kv(cache, case.block_table, case.seq_len)
    try:
        got = fn(cache.clone(), list(case.block_table), case.seq_len)
    except Raised as exc:
        error = exc.args[0]
        if case.seq_len == 0:
            return [tr("{error} (the sequence is empty: the answer is a tensor with 0 rows)", error=error)]
        if isinstance(exc.error, IndexError):
            return [tr("{error} (the cache holds {slots} slots: {blocks} blocks, and the block size here is "
                       "{block_size}, cache.shape[1])", error=error, slots=case.num_blocks * case.block_size,
                       blocks=case.num_blocks, block_size=case.block_size)]
        return [error]
    if not isinstance(got, torch.Tensor):
        return [tr("expected a tensor of shape {shape}, got {got}", shape=tuple(expected.shape), got=short(got))]
    if got.shape != expected.shape:
        if got.dim() == 3 and got.shape[0] == -(-case.seq_len // case.block_size) * case.block_size:
            return [tr("expected shape {expected}, got {got} (whole blocks: the empty tail of the last block is not "
                       "part of the sequence)", expected=tuple(expected.shape), got=tuple(got.shape))]
        return [tr("expected shape {expected}, got {got}", expected=tuple(expected.shape), got=tuple(got.shape))]
    if got.dtype != cache.dtype:
        if torch.equal(got, expected.to(got.dtype)):
            return [tr("dtype: the cache is {cache} but the result is {result}. A gather copies rows, it does not "
                       "convert them: create the result with dtype=cache.dtype, or index the cache (the rows are the "
                       "right ones otherwise)", cache=cache.dtype, result=got.dtype)]
        return [tr("dtype: the cache is {cache} but the result is {result}. A gather copies rows, it does not convert "
                   "them: create the result with dtype=cache.dtype, or index the cache", cache=cache.dtype,
                   result=got.dtype)]
    wrong = [p for p in range(case.seq_len) if not torch.equal(got[p], expected[p])]
    if not wrong:
        return []
    flat = cache.reshape(-1, case.num_kv_heads, case.head_dim)
    slots = [_slot_of(got[p], flat) for p in range(case.seq_len)]
    owned = case.block_table[: -(-case.seq_len // case.block_size)]
    lines: list[str] = []
    if all(s is not None for s in slots):
        cause = diagnose_slots(case.block_table, case.block_size, range(case.seq_len), slots)
        lines += [cause] if cause else []
    lines.append(tr("{wrong} of {total} positions wrong", wrong=len(wrong), total=case.seq_len))
    for p in wrong[:MAX_SHOWN]:
        line = tr("position {p}: expected {expected}, got {got}", p=p,
                  expected=_describe_slot(_slot_of(expected[p], flat), expected[p], case.block_size, owned),
                  got=_describe_slot(slots[p], got[p], case.block_size, owned))
        lines.append(f"  {line}")
    if len(wrong) > MAX_SHOWN:
        more = tr("... and {more} more", more=len(wrong) - MAX_SHOWN)
        lines.append(f"  {more}")
    return lines


def _gather_in(path: str | Path) -> tuple[GatherFn | None, str]:
    """The ``gather_kv`` a reader's file defines, or None and why not, in words the grader prints."""
    return function_in(path, "gather_kv", "(cache, block_table, seq_len)",  # en: not shown to readers (code)
                       (reference.gather_kv, shipped_gather_kv), tr("gather"))


def check_gather_kv(fn: GatherFn | str | Path) -> bool:
    """Grade ``fn(cache, block_table, seq_len) -> [seq_len, num_kv_heads, head_dim]`` in the cache's dtype.

    ``fn`` is the function, or the path of the file that defines it (``my_engine/gather.py``): a
    file that passes is marked passed as it is now, and from then on chapter 5's decoder gathers
    through it, for as long as the file stays unchanged
    (:func:`~pagedkv_edu.exercises.my_engine.load_parts`, :func:`gather_attention`).
    """
    return grade_part(GATHER_NAME, fn, GATHER_CASES, HIDDEN_GATHER_CASES, _run_gather, _gather_in,
                      passed=tr("chapter 5's decoder gathers through it"))


# --- the reader's gather, as the decoder's attention (chapter 5 and the last chapter) ---------------------

def _gathered_problem(got: Any, cache: torch.Tensor, table: Sequence[int], length: int) -> Message | None:
    """What is wrong with a gather's answer for one sequence, or None.

    A gather copies rows, so its answer must equal the shipped gather's bit for bit (NaN where a
    slot holds NaN): any other value is a wrong row, and the message says which slot it came from.
    """
    want = shipped_gather_kv(cache, table, length)
    if not isinstance(got, torch.Tensor):
        return tr("returned {got}, not a tensor of shape {shape}", got=short(got), shape=tuple(want.shape))
    differ: list[Message] = []
    if tuple(got.shape) != tuple(want.shape):
        differ.append(tr("shape {mine}, the engine needs {need}", mine=tuple(got.shape), need=tuple(want.shape)))
    if got.dtype != want.dtype:
        differ.append(tr("dtype {mine}, the engine needs {need}", mine=got.dtype, need=want.dtype))
    if got.device != want.device:
        differ.append(tr("device {mine}, the engine needs {need}", mine=got.device, need=want.device))
    if differ:
        problems = differ[0]
        for more in differ[1:]:     # "a; b; c", each part rendered in the reader's language when printed
            problems = tr("{problems}; {problem}", problems=problems, problem=more)
        if tuple(got.shape[1:]) == tuple(want.shape[1:]) and got.shape[0] == len(table) * cache.shape[1]:
            return tr("returned {problems} (whole blocks: the empty tail of the last block is not part of the "
                      "sequence)", problems=problems)
        return tr("returned {problems}", problems=problems)
    same = (got == want) | (got.isnan() & want.isnan())
    wrong = (~same).flatten(1).any(1).nonzero().flatten().tolist()
    if not wrong:
        return None
    block_size = cache.shape[1]
    flat = cache.reshape(-1, *cache.shape[2:])
    slots = [_slot_of(got[p], flat) for p in wrong]
    p, slot = wrong[0], slots[0]
    entry = p // block_size
    where = dict(p=p, entry=entry, block=table[entry], slot=table[entry] * block_size + p % block_size,
                 holds=_describe_slot(slot, got[p], block_size, table), wrong=len(wrong), length=length)
    cause = diagnose_slots(table, block_size, wrong, slots) if None not in slots else None
    if cause:
        return tr("position {p} (table entry {entry}: block {block}, slot {slot}) holds {holds}; {wrong} of {length} "
                  "positions wrong ({cause})", cause=cause, **where)
    return tr("position {p} (table entry {entry}: block {block}, slot {slot}) holds {holds}; {wrong} of {length} "
              "positions wrong", **where)


def _writes(cache: torch.Tensor) -> int | None:
    """How many in-place writes torch has counted on ``cache`` and its views; None for a tensor made under
    ``torch.inference_mode``, which keeps no count."""
    return None if cache.is_inference() else cache._version


def gather_attention(gather_kv: GatherFn, name: str = "your_gather",
                     part: str = tr("your gather_kv ({file})", file=GATHER_FILE)) -> Callable[..., torch.Tensor]:
    """An attention function (the engine's ``backend``) that gathers each sequence's K/V with ``gather_kv``
    and attends causally after its cached prefix: chapter 3's torch attention, in the model.

    Each sequence with new tokens is gathered on its own, through the entries of its table that
    its tokens fill, then :func:`~pagedkv_edu.attention.reference.prefix_causal_sdpa` runs: a
    prompt causally, the rest of a prompt after its cached prefix, a decode token over everything.
    A gather that passed its grader can still be wrong on a case the grader never drew, and inside
    the model a wrong row gives wrong tokens with no error. So every answer is checked before it is
    used (its shape, dtype and device, then every row against the shipped gather, bit for bit), and
    so is the cache, which a gather must only read (torch's count of in-place writes; a cache made
    under ``torch.inference_mode`` keeps none). The first failure stops the engine with a
    :class:`~pagedkv_edu.engine.guards.PartError` that names ``part``, the sequence, the call and the
    bad value; whatever the gather raises is reported the same way, its cause kept.
    """
    def gathered(cache: torch.Tensor, what: str, s: int, table: list[int], length: int) -> torch.Tensor:
        call = tr("the step's sequence {s}, its {what}: gather_kv({cache}, {table}, {length})", s=s, what=what,
                  cache=f"{what.lower()}_cache", table=short(table, 40), length=length)
        version = _writes(cache)
        try:
            got = gather_kv(cache, table, length)
        except Exception as exc:   # noqa: BLE001 (a reader's code can raise anything: name it, keep the cause)
            raise PartError(tr("{part}: {call} {error}", part=part, call=call, error=describe_exception(exc))) from exc
        if _writes(cache) != version:
            raise PartError(tr("{part}: {call} wrote into the cache: a gather only reads it (every sequence's K/V "
                               "lives there)", part=part, call=call))
        problem = _gathered_problem(got, cache, table, length)
        if problem is not None:
            raise PartError(tr("{part}: {call}: {problem}", part=part, call=call, problem=problem))
        return got

    def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
               seq_lens: torch.Tensor, query_start_loc: torch.Tensor, scale: float) -> torch.Tensor:
        out = torch.zeros_like(q)
        starts, lens = query_start_loc.tolist(), seq_lens.tolist()
        for s, length in enumerate(lens):
            a, b = starts[s], starts[s + 1]
            if b == a:
                continue
            table = block_tables[s, :-(-length // k_cache.shape[1])].tolist()
            k = gathered(k_cache, "K", s, table, length)
            v = gathered(v_cache, "V", s, table, length)
            out[a:b] = prefix_causal_sdpa(q[a:b], k, v, scale)
        return out

    attend.__name__ = attend.__qualname__ = name
    return attend
