"""Grader for chapter 5's "Your turn": the layout of one forward step of a batch.

The decoder takes a step's tokens end to end, with no padding, so three lists must be right
for every token: its *position* (which RoPE rotates by), its *slot* (where its K/V goes),
and, per sequence, the row of its *last* token (whose logits pick the next token). The cases
are a decode step, a prefill of prompts of different lengths, and a mixed step in which one
prompt's first blocks are already cached (chapter 7's prefix hit). The usual bugs: counting
positions from 0 (ignores what is cached), using the logical block number as the physical
one, taking the first token's logits instead of the last's.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import report
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


def _where(slot: object, case: StepCase, seq: int) -> str:
    """Explain a (wrong) slot: whose block it is, and which position that slot really holds."""
    if not isinstance(slot, numbers.Integral) or isinstance(slot, bool):
        return f"not an integer slot: {slot!r}"
    block, offset = divmod(int(slot), case.block_size)
    table = case.block_tables[seq]
    if block not in table:
        return f"block {block} is not in this sequence's table {list(table)}"
    return f"block {block}, offset {offset}: the slot of position {table.index(block) * case.block_size + offset}"


def check_step_layout(fn: Callable[[list[list[int]], list[int], list[int], int],
                                   tuple[Sequence[int], Sequence[int], Sequence[int]]]) -> bool:
    """Grade ``fn(block_tables, seq_lens, query_lens, block_size) -> (positions, slots, last_token_index)``."""
    failures: list[str] = []
    for case in STEP_CASES:
        exp_pos, exp_slots, exp_last = reference.step_layout(case.block_tables, case.seq_lens, case.query_lens,
                                                             case.block_size)
        try:
            got_pos, got_slots, got_last = (list(x) for x in fn([list(t) for t in case.block_tables],
                                                                 list(case.seq_lens), list(case.query_lens),
                                                                 case.block_size))
        except Exception as exc:  # the learner's code may raise anything; report it, don't crash
            failures.append(f"{case.name}: raised {type(exc).__name__}: {exc}")
            break
        if failures:   # the first failing case is shown in full, later ones in a line
            if (got_pos, got_slots, got_last) != (exp_pos, exp_slots, exp_last):
                failures.append(f"also wrong: {case.name}")
            continue
        if len(got_pos) != len(exp_pos) or len(got_slots) != len(exp_slots):
            failures.append(f"{case.name}: the step has {len(exp_pos)} new tokens "
                            f"({' + '.join(map(str, case.query_lens))}); got {len(got_pos)} positions and "
                            f"{len(got_slots)} slots")
            continue
        owner = [i for i, n in enumerate(case.query_lens) for _ in range(n)]
        wrong = [t for t in range(len(exp_pos)) if (got_pos[t], got_slots[t]) != (exp_pos[t], exp_slots[t])]
        if wrong:
            failures.append(f"{case.name}: {len(wrong)} of {len(exp_pos)} tokens wrong")
            failures.append(f"  {'token':>5} {'seq':>3} {'position':>8} {'got':>5} {'slot':>6} {'got':>5}  "
                            f"where the slot you gave lands")
            for t in wrong[:MAX_SHOWN]:
                failures.append(f"  {t:>5} {owner[t]:>3} {exp_pos[t]:>8} {got_pos[t]!s:>5} {exp_slots[t]:>6} "
                                f"{got_slots[t]!s:>5}  {_where(got_slots[t], case, owner[t])}")
            if len(wrong) > MAX_SHOWN:
                failures.append(f"  ... and {len(wrong) - MAX_SHOWN} more")
        if got_last != exp_last:
            failures.append(f"{case.name}: last_token_index expected {exp_last}, got {got_last} "
                            f"(the logits row of each sequence's last new token)")
    return report("step_layout", failures)
