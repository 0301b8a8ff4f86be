"""Reference solutions for chapter 6: block-aware admission with a watermark, and the scheduler's step."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..ch6 import Seq, SchedulerState


def can_admit(num_tokens: int, block_size: int, num_free_blocks: int, watermark_blocks: int, num_running: int) -> bool:
    """Admit when the prompt's blocks fit and ``watermark_blocks`` stay free for running requests to grow.

    With nothing running there is no growth to protect, so the watermark does not apply.
    """
    need = -(-num_tokens // block_size)
    return need + (watermark_blocks if num_running else 0) <= num_free_blocks


def schedule(state: SchedulerState) -> dict[Seq, int]:
    """One step: grow the running oldest first (preempting the newest), then admit first come first served."""
    budget, plan, preempted = state.token_budget, {}, False
    for seq in list(state.running):
        if budget == 0 or seq not in state.running:   # out of budget, or preempted as a victim below
            break
        new = min(seq.num_tokens - seq.num_computed, budget)
        while not state.memory.can_grow(seq, new):
            victim = state.running.pop()               # the newest: the last admitted
            state.memory.release(victim)
            state.waiting.appendleft(victim)           # first in line to come back
            preempted = True
            if victim is seq:
                break
        if seq in state.running:
            state.memory.grow(seq, new)
            plan[seq] = new
            budget -= new
    while state.waiting and budget > 0 and not preempted:
        seq = state.waiting[0]
        if sum(s.num_seqs for s in state.running) + seq.num_seqs > state.max_num_seqs:
            break
        new = min(seq.num_tokens, budget)              # a long prompt: its first chunk
        if not state.memory.can_admit(seq, new):
            break                                      # the head blocks the queue: nobody starves
        state.waiting.popleft()
        state.memory.admit(seq, new)
        state.running.append(seq)
        plan[seq] = new
        budget -= new
    return plan
