"""Grader for chapter 5's "Your turn": the layout of one forward step of a batch.

The decoder takes a step's tokens end to end, with no padding, so three lists must be right
for every token: its *position* (which RoPE rotates by), its *slot* (where its K/V goes),
and, per sequence, the row of its *last* token (whose logits pick the next token). The cases
are a decode step, a prefill of prompts of different lengths, and a mixed step in which one
prompt's first blocks are already cached (chapter 8's prefix hit). The usual bugs: counting
positions from 0 (ignores what is cached), using the logical block number as the physical
one, taking the first token's logits instead of the last's. Hidden random batches
(:mod:`.grading`) use block sizes that are not powers of two, one-token sequences and
sequences that end exactly on a block boundary.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .ch2 import HIDDEN_BLOCK_SIZES, diagnose_batch_slots, random_table
from .grading import Reader, as_int_list, grade, short
from .messages import Message, tr
from .solutions import ch5 as reference

MAX_SHOWN = 6   # wrong tokens printed per failing case


@dataclass(frozen=True)
class StepCase:
    name: str
    block_tables: tuple[tuple[int, ...], ...]
    seq_lens: tuple[int, ...]       # tokens after the step
    query_lens: tuple[int, ...]     # new tokens this step
    block_size: int


STEP_CASES: tuple[StepCase, ...] = (
    StepCase(tr("decode: sequences of 5, 17 and 9 tokens each add one, block size 4"),
             ((7, 1), (3, 12, 0, 5, 9), (2, 14, 6)), (5, 17, 9), (1, 1, 1), 4),
    StepCase(tr("prefill: prompts of 6 and 3 tokens, block size 4"), ((4, 11), (8,)), (6, 3), (6, 3), 4),
    StepCase(tr("mixed: 8 of a 13-token prompt cached (prefix hit), next to a decode, block size 4"),
             ((10, 3, 6, 1), (0, 13)), (13, 7), (5, 1), 4),
    StepCase(tr("block size 1: a decode and a 3-token prompt"), ((5, 2, 9), (0, 7, 3)), (3, 3), (1, 3), 1),
)


def _hidden_step_cases(count: int = 120, seed: int = 6) -> list[StepCase]:
    """Batches of decodes, prefills and prefix-hit prompts at block sizes that are mostly not powers of two."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        b = rng.choice(HIDDEN_BLOCK_SIZES)
        seq_lens, query_lens, lengths = [], [], []
        for _ in range(rng.randint(1, 4)):
            n = rng.choice([1, b, 2 * b, rng.randint(1, 4 * b), rng.randint(1, 4 * b)])
            seq_lens.append(n)
            query_lens.append(rng.choice([1, n, rng.randint(1, n)]))
            lengths.append(-(-n // b))
        ids = random_table(rng, sum(lengths) + rng.randint(0, 8), sum(lengths))
        tables, start = [], 0
        for length in lengths:
            tables.append(tuple(ids[start:start + length]))
            start += length
        cases.append(StepCase(tr("hidden case {n}: tables {tables}, seq_lens {seq_lens}, query_lens {query_lens}, "
                                 "block size {block_size}", n=i + 1, tables=[list(t) for t in tables],
                                 seq_lens=seq_lens, query_lens=query_lens, block_size=b),
                              tuple(tables), tuple(seq_lens), tuple(query_lens), b))
    return cases


HIDDEN_STEP_CASES = _hidden_step_cases()


def _where(slot: int, case: StepCase, seq: int) -> Message:
    """Explain a (wrong) slot: whose block it is, and which position that slot really holds."""
    block, offset = divmod(slot, case.block_size)
    table = case.block_tables[seq]
    if block not in table:
        return tr("block {block} is not in this sequence's table {table}", block=block, table=list(table))
    return tr("block {block}, offset {offset}: the slot of position {position}", block=block, offset=offset,
              position=table.index(block) * case.block_size + offset)


def _run_step(fn: Reader, case: StepCase) -> list[str]:
    exp_pos, exp_slots, exp_last = reference.step_layout(case.block_tables, case.seq_lens, case.query_lens,
                                                         case.block_size)
    result = fn([list(t) for t in case.block_tables], list(case.seq_lens), list(case.query_lens), case.block_size)
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        return [tr("expected three lists (positions, slots, last_token_index), got {got}", got=short(result))]
    lists = []
    for what, value in zip((tr("position"), tr("slot"), tr("row index")), result):
        converted, problem = as_int_list(value, what)
        if converted is None:
            return [problem]
        lists.append(converted)
    got_pos, got_slots, got_last = lists
    if len(got_pos) != len(exp_pos) or len(got_slots) != len(exp_slots):
        return [tr("the step has {count} new tokens ({sum}); got {positions} positions and {slots} slots",
                   count=len(exp_pos), sum=" + ".join(map(str, case.query_lens)), positions=len(got_pos),
                   slots=len(got_slots))]
    lines = []
    owner = [i for i, n in enumerate(case.query_lens) for _ in range(n)]
    wrong = [t for t in range(len(exp_pos)) if (got_pos[t], got_slots[t]) != (exp_pos[t], exp_slots[t])]
    if wrong:
        groups = [(table, [exp_pos[t] for t in wrong if owner[t] == i], [got_slots[t] for t in wrong if owner[t] == i])
                  for i, table in enumerate(case.block_tables)]
        cause = diagnose_batch_slots(groups, case.block_size)
        if cause and all(got_pos[t] == exp_pos[t] for t in wrong):
            lines.append(cause)
        lines.append(tr("{wrong} of {total} tokens wrong", wrong=len(wrong), total=len(exp_pos)))
        lines.append(tr("  token seq position   got   slot   got  where the slot you gave lands"))   # the columns below
        for t in wrong[:MAX_SHOWN]:
            lines.append(f"  {t:>5} {owner[t]:>3} {exp_pos[t]:>8} {got_pos[t]:>5} {exp_slots[t]:>6} "
                         f"{got_slots[t]:>5}  {_where(got_slots[t], case, owner[t])}")
        if len(wrong) > MAX_SHOWN:
            lines.append(tr("  ... and {count} more", count=len(wrong) - MAX_SHOWN))
    if got_last != exp_last:
        lines.append(tr("last_token_index expected {expected}, got {got} (the logits row of each sequence's last new "
                        "token)", expected=exp_last, got=got_last))
    return lines


def check_step_layout(fn: Callable[[list[list[int]], list[int], list[int], int],
                                   tuple[Sequence[int], Sequence[int], Sequence[int]]]) -> bool:
    """Grade ``fn(block_tables, seq_lens, query_lens, block_size) -> (positions, slots, last_token_index)``."""
    return grade("step_layout（一步的批次排列）", fn, STEP_CASES, HIDDEN_STEP_CASES, _run_step)
