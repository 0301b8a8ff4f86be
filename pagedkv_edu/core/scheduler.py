"""The scheduler: every step, which tokens of which sequences run, in the KV memory it asks (chapter 6).

Two parts, so a reader can replace the first. The *policy* is a function ``schedule(state) ->
{sequence: tokens}``: :func:`schedule` is vLLM v1's two loops (grow the running oldest first,
preempting the newest while memory says no; then, unless that happened, admit the waiting
first come first served while seats, the token budget and memory allow). The
:class:`Scheduler` around it keeps the queues and the records: it hands the policy a
:class:`SchedulerState`, records what each memory call granted, checks the plan against it,
advances each scheduled sequence's ``num_computed_tokens`` and returns a :class:`ScheduledStep`
that says, per sequence, only the block ids its table gained.

The contract a policy works under: ``memory.grow(seq, n)`` and ``memory.admit(seq, n, hit)``
grant room for ``n`` tokens after ``seq.num_computed_tokens`` (after ``hit`` for a new
sequence) or return None and change nothing; ``state.preempt(victim)`` frees the victim (its
count becomes 0) or swaps it out (its count is kept), and puts it at the front of the queue;
the policy moves an admitted sequence from ``state.waiting`` to ``state.running`` itself, and
returns what it granted. The count is advanced after the policy returns, never by the memory.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..checks import check_whole, is_whole
from ..specs import hit_rate, step_kind
from .block_manager import BlockCopies
from .block_table import blocks_needed
from .prefix_cache import NO_HIT, PrefixHit
from .request import Status

PREEMPTION_MODES: tuple[str, ...] = ("recompute", "swap")
"""What preemption does with a victim's K/V: free it (recomputed later) or copy it to host memory (paper §4.5)."""


@dataclass
class TokenCounts:
    """Prefill work, counted by the scheduler as it decides it: the one record the engine and the simulator report."""

    prompt_tokens: int = 0        # tokens of every sequence at its first admission, each counted once
    prefix_hit_tokens: int = 0    # of those, found in the prefix cache: compute saved by sharing
    resumed_hit_tokens: int = 0   # tokens a preempted sequence found in the cache when it came back
    prefill_tokens: int = 0       # prompt tokens computed (recomputation after a preemption included)

    @property
    def prefix_hit_rate(self) -> float:
        """Share of first-admission tokens the prefix cache supplied (vLLM's measure)."""
        return hit_rate(self.prefix_hit_tokens, self.prompt_tokens)


class ScheduledSeq(NamedTuple):
    """One sequence's share of a step. Immutable; a NamedTuple because one is built per sequence per step."""

    seq: Any
    num_new_tokens: int          # tokens computed in this step
    num_computed_tokens: int     # tokens whose K/V were in memory before it (a cached prefix included)
    is_prefill: bool             # it is computing its prompt (or recomputing after a preemption)
    samples: bool                # the step reaches its last token: its logits give the next token
    new_block_ids: tuple[int, ...] = ()   # what its block table gained: the whole table for a fresh row
    first_new_block: int = 0     # the table index new_block_ids[0] goes to (a copy-on-write rewrites the last)

    @property
    def seq_len(self) -> int:
        """Its context length once this step's tokens are in."""
        return self.num_computed_tokens + self.num_new_tokens


@dataclass
class ScheduledStep:
    """One step's decisions: what runs, what was admitted, preempted or failed, which blocks move first."""

    scheduled: list[ScheduledSeq] = field(default_factory=list)
    admitted: list[Any] = field(default_factory=list)    # admitted in this step (swapped back in included)
    preempted: list[Any] = field(default_factory=list)   # released or swapped out, back at the queue's front
    failed: list[Any] = field(default_factory=list)      # can never be held: removed
    copies: BlockCopies = field(default_factory=BlockCopies)   # swap out, copy on write, swap in: in that order

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    @property
    def kind(self) -> str:
        """"decode", "prefill", "mixed" or "" (:func:`pagedkv_edu.specs.step_kind`, the one definition)."""
        return step_kind([s.num_new_tokens for s in self.scheduled])

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


@dataclass
class SchedulerState:
    """What a policy decides over: the queues (changed in place), the memory, the step's two limits.

    ``memory`` answers ``lookup``, ``admit`` and ``grow`` (and whatever else the scheduler's memory
    offers to read); ``preempt(seq)`` is the only way to take memory from a running sequence.
    """

    running: list[Any]                # the batch, oldest admission first
    waiting: deque[Any]               # first come first served; a preempted sequence goes back to the front
    memory: Any
    token_budget: int                 # tokens one step may compute (vLLM's max_num_batched_tokens)
    max_num_seqs: int                 # seats one step may run: a request's n until its samples are forked
    preempt: Callable[[Any], None]


def schedule(state: SchedulerState) -> dict[Any, int]:
    """One step, vLLM v1's two loops: the tokens each scheduled sequence computes, in batch order."""
    memory, budget, plan = state.memory, state.token_budget, {}
    preempted = False
    for seq in list(state.running):               # 1. the running, oldest first
        if budget == 0:
            break
        if seq.status is not Status.RUNNING:      # preempted above, as an older sequence's victim
            continue
        new = min(seq.num_tokens - seq.num_computed_tokens, budget)
        if new == 0:
            continue
        while memory.grow(seq, new) is None:      # memory says no: preempt the newest, and ask again
            victim = state.running[-1]
            state.preempt(victim)
            preempted = True
            if victim is seq:
                break
        if seq.status is Status.RUNNING:
            plan[seq] = new
            budget -= new
    seats = sum(s.num_seqs for s in state.running)
    while state.waiting and budget > 0 and not preempted:   # 2. the waiting, unless memory ran short
        seq = state.waiting[0]
        if seats + seq.num_seqs > state.max_num_seqs:
            break
        hit = memory.lookup(seq)
        start = max(hit.num_tokens, seq.num_computed_tokens)   # a swapped-out sequence's K/V come back
        new = min(seq.num_tokens - start, budget)
        if memory.admit(seq, new, hit) is None:
            break                                 # the head blocks the queue: nobody starves
        state.waiting.popleft()
        state.running.append(seq)
        seats += seq.num_seqs
        plan[seq] = new
        budget -= new
    return plan


class _Granted:
    """The memory as a policy sees it during one step: every grant is recorded ``seq -> (start, tokens, ids, admitted)``."""

    def __init__(self, memory: Any) -> None:
        self.memory = memory
        self.log: dict[Any, tuple[int, int, list[int], bool]] = {}

    def __getattr__(self, name: str) -> Any:     # reading the memory (pool, block_size, ...) goes through
        return getattr(self.memory, name)

    def __contains__(self, seq: Any) -> bool:
        return seq in self.memory

    def lookup(self, seq: Any) -> PrefixHit:
        return self.memory.lookup(seq)

    def admit(self, seq: Any, num_new_tokens: int, hit: PrefixHit = NO_HIT) -> list[int] | None:
        start = max(hit.num_tokens, seq.num_computed_tokens)
        ids = self.memory.admit(seq, num_new_tokens, hit)
        if ids is not None:
            self.log[seq] = (start, num_new_tokens, ids, True)
        return ids

    def grow(self, seq: Any, num_new_tokens: int) -> list[int] | None:
        ids = self.memory.grow(seq, num_new_tokens)
        if ids is not None:
            self.log[seq] = (seq.num_computed_tokens, num_new_tokens, ids, False)
        return ids


class Scheduler:
    """The queues, the records and a policy: :func:`schedule` unless a reader brings their own.

    ``max_num_seqs`` caps the running sequences (each sample of an ``n > 1`` request counts);
    ``max_num_batched_tokens`` caps the tokens computed per step (None: no cap, every prompt is
    prefilled whole). ``preemption_mode="swap"`` needs a memory with a swap space; a victim that
    does not fit in it is recomputed instead.
    """

    def __init__(self, memory: Any, max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                 preemption_mode: str = "recompute", schedule: Callable[[SchedulerState], Any] = schedule) -> None:
        for name, value in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens)):
            if value is not None:
                check_whole(name, value, 1)
        if preemption_mode not in PREEMPTION_MODES:
            raise ValueError(f"unknown preemption_mode {preemption_mode!r}; choose one of {PREEMPTION_MODES}")
        if preemption_mode == "swap" and getattr(memory, "swap", None) is None:
            raise ValueError("preemption_mode='swap' needs paged memory with a swap space (BlockManager(..., swap=))")
        if not callable(schedule):
            raise ValueError(f"schedule must be a function schedule(state) -> {{seq: tokens}}, got {schedule!r}")
        self.memory = memory
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.preemption_mode = preemption_mode
        self.policy = schedule
        self.waiting: deque[Any] = deque()
        self.running: list[Any] = []
        self.num_preemptions = 0
        self.num_swaps = 0
        self.counts = TokenCounts()
        self._forked: list[Any] = []   # forked children whose whole table the runner has not had yet

    # --- the queues ------------------------------------------------------------------------
    def add(self, seq: Any) -> None:
        """Queue a sequence; refuses one that could never be held, before anything changes."""
        if not self.memory.fits(seq.max_num_tokens):
            raise ValueError(f"sequence {seq.seq_id!r}: up to {seq.max_num_tokens} tokens can never fit in this "
                             f"KV memory")
        if _index(self.waiting, seq) is not None or _index(self.running, seq) is not None:
            raise ValueError(f"sequence {seq.seq_id!r} is already queued or running")
        seq.status, seq.num_computed_tokens, seq.prompt_end = Status.WAITING, 0, 0
        self.waiting.append(seq)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def preempted(self) -> list[Any]:
        """Waiting sequences that ran before and were preempted (to be recomputed or swapped back in)."""
        return [s for s in self.waiting if s.status in (Status.PREEMPTED, Status.SWAPPED)]

    # --- one step --------------------------------------------------------------------------
    def schedule(self) -> ScheduledStep:
        """Decide one step with the policy, then bring the records and the step up to date."""
        step, granted = ScheduledStep(), _Granted(self.memory)
        state = SchedulerState(self.running, self.waiting, granted, self.max_num_batched_tokens or sys.maxsize,
                               self.max_num_seqs or sys.maxsize, lambda victim: self._preempt(victim, step, granted))
        plan = self.policy(state)
        if self.policy is not schedule:
            self._check_plan(plan, granted.log, state)
        for seq, n in plan.items():
            start, _, ids, admitted = granted.log[seq]
            if admitted:
                self._admitted(seq, start, step)
            seq.num_computed_tokens = start + n
            is_prefill = start < seq.prompt_end
            self.counts.prefill_tokens += n if is_prefill else 0
            fork = _index(self._forked, seq) if self._forked else None    # a fork is rare: skip the scan
            if fork is not None:
                del self._forked[fork]
                ids, admitted = self.memory.block_ids(seq), True
            first = 0 if admitted or not ids else blocks_needed(start + n, self.memory.block_size) - len(ids)
            step.scheduled.append(ScheduledSeq(seq, n, start, is_prefill, start + n == seq.num_tokens, tuple(ids),
                                               first))
        if not plan and not self.running and self.waiting:   # memory is all free and the head still does not fit
            seq = self.waiting.popleft()
            if seq.status is Status.SWAPPED:
                self.memory.release(seq)
            seq.status = Status.FINISHED
            step.failed.append(seq)
        step.copies = self.memory.take_copies()
        return step

    def _admitted(self, seq: Any, start: int, step: ScheduledStep) -> None:
        """A sequence left the queue with ``start`` tokens already in memory (a prefix hit, or its swapped K/V)."""
        if seq.status is Status.WAITING:
            self.counts.prompt_tokens += seq.num_tokens
            self.counts.prefix_hit_tokens += start
            seq.num_cached_tokens = start
        elif seq.status is Status.PREEMPTED:
            self.counts.resumed_hit_tokens += start
        if seq.status is not Status.SWAPPED:     # (re)prefill all it has; a swapped one resumes where it was
            seq.prompt_end = seq.num_tokens
        seq.status = Status.RUNNING
        step.admitted.append(seq)

    def _preempt(self, victim: Any, step: ScheduledStep, granted: _Granted) -> None:
        i = _index(self.running, victim)
        if i is None:
            raise ValueError(f"sequence {victim.seq_id!r} is not running; only a running sequence can be preempted")
        del self.running[i]
        granted.log.pop(victim, None)
        self._forget_fork(victim)
        if self.preemption_mode == "swap" and self.memory.swap_out(victim):
            victim.status = Status.SWAPPED     # keeps num_computed_tokens: its K/V come back
            self.num_swaps += 1
        else:
            self.memory.release(victim)
            victim.status, victim.num_computed_tokens = Status.PREEMPTED, 0
        victim.num_preemptions += 1
        self.waiting.appendleft(victim)
        step.preempted.append(victim)
        self.num_preemptions += 1

    def _check_plan(self, plan: Any, log: dict[Any, tuple[int, int, list[int], bool]], state: SchedulerState) -> None:
        """A policy's plan must be exactly what memory granted, for running sequences, within both limits."""
        if not isinstance(plan, dict):
            raise ValueError(f"the scheduling policy {_name(self.policy)} returned {type(plan).__name__}; it must "
                             f"return a dict {{sequence: tokens}}")
        running = {id(s) for s in self.running}
        for seq, n in plan.items():
            if not is_whole(n):
                raise ValueError(f"the scheduling policy {_name(self.policy)} planned {n!r} tokens for "
                                 f"{getattr(seq, 'seq_id', seq)!r}: a token count is a whole number (an int)")
            if id(seq) not in running:
                raise ValueError(f"the scheduling policy {_name(self.policy)} planned {getattr(seq, 'seq_id', seq)!r}, "
                                 f"which is not in state.running after the step")
            if seq not in log or log[seq][1] != n:
                got = "nothing" if seq not in log else f"{log[seq][1]} tokens"
                raise ValueError(f"the scheduling policy {_name(self.policy)} planned {n!r} tokens for {seq.seq_id!r}, "
                                 f"but memory granted it {got}: admit or grow exactly what you schedule")
        missing = [s.seq_id for s in log if s not in plan]
        if missing:
            raise ValueError(f"the scheduling policy {_name(self.policy)} took memory for {missing} but did not "
                             f"schedule them")
        if sum(plan.values()) > state.token_budget:
            raise ValueError(f"the scheduling policy {_name(self.policy)} planned {sum(plan.values())} tokens, over "
                             f"the token budget of {state.token_budget}")
        seats = sum(s.num_seqs for s in self.running)
        if seats > state.max_num_seqs:
            raise ValueError(f"the scheduling policy {_name(self.policy)} runs {seats} seats, over max_num_seqs="
                             f"{state.max_num_seqs}")
        if any(_index(self.waiting, s) is not None for s in plan):
            raise ValueError(f"the scheduling policy {_name(self.policy)} admitted a sequence but left it in "
                             f"state.waiting")

    # --- between steps: forks and endings ------------------------------------------------------
    def fork(self, parent: Any, child: Any) -> None:
        """Run ``child`` beside its running ``parent``, sharing its memory; it is now the newest sequence."""
        if _index(self.running, parent) is None:
            raise ValueError(f"sequence {parent.seq_id!r} is not running; only a running sequence can be forked")
        if (self.max_num_seqs is not None
                and sum(s.num_seqs for s in self.running) + child.num_seqs > self.max_num_seqs):
            raise ValueError(f"forking {child.seq_id!r} would run more than max_num_seqs={self.max_num_seqs} sequences")
        self.memory.fork(parent, child)
        self.running.append(child)
        self._forked.append(child)
        child.status, child.num_computed_tokens, child.prompt_end = (Status.RUNNING, parent.num_computed_tokens,
                                                                     parent.prompt_end)

    def finish(self, seq: Any, *, release: bool = True) -> None:
        """A running sequence is done: give its memory back (``release=False`` keeps its table readable)."""
        i = _index(self.running, seq)
        if i is None:
            raise ValueError(f"sequence {seq.seq_id!r} is not running")
        del self.running[i]
        self._forget_fork(seq)
        if release:
            self.memory.release(seq)
        seq.status = Status.FINISHED

    def abort(self, seq: Any) -> None:
        """Remove a sequence wherever it is (running, waiting, swapped out), giving back what it holds."""
        if _index(self.running, seq) is not None:
            self.finish(seq)
            return
        i = _index(self.waiting, seq)
        if i is None:
            raise ValueError(f"sequence {seq.seq_id!r} is neither running nor waiting")
        del self.waiting[i]
        if seq.status is Status.SWAPPED:
            self.memory.release(seq)
        seq.status = Status.FINISHED

    def _forget_fork(self, seq: Any) -> None:
        i = _index(self._forked, seq)
        if i is not None:
            del self._forked[i]


def _index(seqs: Any, seq: Any) -> int | None:
    """Where ``seq`` itself is in ``seqs`` (by identity: two records with equal fields are two sequences)."""
    return next((i for i, s in enumerate(seqs) if s is seq), None)


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", type(fn).__name__)


__all__ = ["PREEMPTION_MODES", "ScheduledSeq", "ScheduledStep", "Scheduler", "SchedulerState", "TokenCounts",
           "schedule"]
