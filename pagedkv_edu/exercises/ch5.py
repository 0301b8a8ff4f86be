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
    StepCase("decode: sequences of 5, 17 and 9 tokens each add one, block size 4",
             ((7, 1), (3, 12, 0, 5, 9), (2, 14, 6)), (5, 17, 9), (1, 1, 1), 4),
    StepCase("prefill: prompts of 6 and 3 tokens, block size 4", ((4, 11), (8,)), (6, 3), (6, 3), 4),
    StepCase("mixed: 8 of a 13-token prompt cached (prefix hit), next to a decode, block size 4",
             ((10, 3, 6, 1), (0, 13)), (13, 7), (5, 1), 4),
    StepCase("block size 1: a decode and a 3-token prompt", ((5, 2, 9), (0, 7, 3)), (3, 3), (1, 3), 1),
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
        cases.append(StepCase(f"hidden case {i + 1}: tables {[list(t) for t in tables]}, seq_lens {seq_lens}, "
                              f"query_lens {query_lens}, block size {b}", tuple(tables), tuple(seq_lens),
                              tuple(query_lens), b))
    return cases


HIDDEN_STEP_CASES = _hidden_step_cases()


def _where(slot: int, case: StepCase, seq: int) -> str:
    """Explain a (wrong) slot: whose block it is, and which position that slot really holds."""
    block, offset = divmod(slot, case.block_size)
    table = case.block_tables[seq]
    if block not in table:
        return f"block {block} is not in this sequence's table {list(table)}"
    return f"block {block}, offset {offset}: the slot of position {table.index(block) * case.block_size + offset}"


def _run_step(fn: Reader, case: StepCase) -> list[str]:
    exp_pos, exp_slots, exp_last = reference.step_layout(case.block_tables, case.seq_lens, case.query_lens,
                                                         case.block_size)
    result = fn([list(t) for t in case.block_tables], list(case.seq_lens), list(case.query_lens), case.block_size)
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        return [f"expected three lists (positions, slots, last_token_index), got {short(result)}"]
    lists = []
    for what, value in zip(("position", "slot", "row index"), result):
        converted, problem = as_int_list(value, what)
        if converted is None:
            return [problem]
        lists.append(converted)
    got_pos, got_slots, got_last = lists
    if len(got_pos) != len(exp_pos) or len(got_slots) != len(exp_slots):
        return [f"the step has {len(exp_pos)} new tokens ({' + '.join(map(str, case.query_lens))}); got "
                f"{len(got_pos)} positions and {len(got_slots)} slots"]
    lines = []
    owner = [i for i, n in enumerate(case.query_lens) for _ in range(n)]
    wrong = [t for t in range(len(exp_pos)) if (got_pos[t], got_slots[t]) != (exp_pos[t], exp_slots[t])]
    if wrong:
        groups = [(table, [exp_pos[t] for t in wrong if owner[t] == i], [got_slots[t] for t in wrong if owner[t] == i])
                  for i, table in enumerate(case.block_tables)]
        cause = diagnose_batch_slots(groups, case.block_size)
        if cause and all(got_pos[t] == exp_pos[t] for t in wrong):
            lines.append(cause)
        lines.append(f"{len(wrong)} of {len(exp_pos)} tokens wrong")
        lines.append(f"  {'token':>5} {'seq':>3} {'position':>8} {'got':>5} {'slot':>6} {'got':>5}  "
                     f"where the slot you gave lands")
        for t in wrong[:MAX_SHOWN]:
            lines.append(f"  {t:>5} {owner[t]:>3} {exp_pos[t]:>8} {got_pos[t]:>5} {exp_slots[t]:>6} "
                         f"{got_slots[t]:>5}  {_where(got_slots[t], case, owner[t])}")
        if len(wrong) > MAX_SHOWN:
            lines.append(f"  ... and {len(wrong) - MAX_SHOWN} more")
    if got_last != exp_last:
        lines.append(f"last_token_index expected {exp_last}, got {got_last} "
                     f"(the logits row of each sequence's last new token)")
    return lines


def check_step_layout(fn: Callable[[list[list[int]], list[int], list[int], int],
                                   tuple[Sequence[int], Sequence[int], Sequence[int]]]) -> bool:
    """Grade ``fn(block_tables, seq_lens, query_lens, block_size) -> (positions, slots, last_token_index)``."""
    return grade("step_layout（一步的批次排列）", fn, STEP_CASES, HIDDEN_STEP_CASES, _run_step)
