"""The scheduler: every step, which tokens of which sequences run, in the KV memory it owns (chapter 6).

vLLM v1's scheduler reduced to its memory logic (Orca's iteration-level scheduling): grow the
running sequences first, oldest first, preempting the newest when memory runs out (recompute,
or swap: chapter 9); then admit waiting ones first come first served while they fit, under
one token budget per step (chunked prefill). Prefix hits and forks come from the memory
(chapters 7, 8). Each sequence's state lives on its own record, found by identity. A
:class:`ScheduledStep` says what runs and, per sequence, only the block ids its table gained.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from .block_manager import MemoryUsage
from ..specs import hit_rate
from ..checks import check_whole

POLICIES: tuple[str, ...] = ("paged", "contiguous")
"""The two ways the scheduler can hold KV memory: blocks from a pool, or one reserved range per request."""

PREEMPTION_MODES: tuple[str, ...] = ("recompute", "swap")
"""What preemption does with a victim's K/V: free it (recomputed later) or copy it to host memory (paper §4.5)."""


class Status(enum.Enum):
    """Where a sequence is in its life. WAITING, PREEMPTED and SWAPPED sequences sit in the waiting queue."""

    WAITING = "waiting"        # queued, never ran
    RUNNING = "running"        # holds memory and runs every step
    PREEMPTED = "preempted"    # its blocks were freed: its K/V will be recomputed (num_computed_tokens == 0)
    SWAPPED = "swapped"        # its blocks were copied to host memory: they come back, nothing is recomputed
    FINISHED = "finished"      # done (or failed); holds nothing


@dataclass
class TokenCounts:
    """Prefill work, counted by the scheduler as it decides it (the engine and the simulator report these)."""

    prompt_tokens: int = 0        # tokens of every sequence at its first admission, each counted once
    prefix_hit_tokens: int = 0    # of those, found in the prefix cache: compute saved by sharing
    resumed_hit_tokens: int = 0   # tokens a preempted sequence found in the cache when it came back
    prefill_tokens: int = 0       # prompt tokens computed (recomputation after a preemption included)

    @property
    def prefix_hit_rate(self) -> float:
        """Share of first-admission tokens the prefix cache supplied (vLLM's measure)."""
        return hit_rate(self.prefix_hit_tokens, self.prompt_tokens)


class KVMemory(Protocol):
    """What the scheduler asks of a KV memory (:class:`~pagedkv_edu.core.block_manager.BlockManager`,
    or the simulator's :class:`~pagedkv_edu.sim.contiguous.ContiguousMemory`). ``hashes`` are the
    sequence's full-block hash chain, computed once on its record (:meth:`block_hashes`).
    A memory with a ``swap`` space also answers ``can_swap_out``, ``swap_out``, ``can_swap_in``, ``swap_in``.
    """

    def fits_ever(self, num_tokens: int) -> bool: ...

    def block_hashes(self, seq: "Schedulable") -> Sequence[bytes] | None:
        """None when this memory does not look at token ids (no prefix cache): the scheduler then passes none."""

    def cached_prefix(self, token_ids: Sequence[int] | None, hashes: Sequence[bytes] | None = None) -> int: ...

    def can_admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None,
                  hashes: Sequence[bytes] | None = None) -> bool: ...

    def admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None,
              hashes: Sequence[bytes] | None = None) -> int:
        """Take memory for the first ``num_tokens`` tokens; returns how many were found cached."""

    def can_grow(self, seq_id: Hashable, n: int = 1) -> bool: ...

    def grow(self, seq_id: Hashable, n: int = 1) -> list[int]:
        """Room for ``n`` more tokens; returns the new block ids (a copy-on-write's replacement first)."""

    def scheduled(self, seq: "Schedulable", start: int = 0) -> None:
        """Its tokens from ``start`` on will be computed by this step (the prefix cache may register them)."""

    def fork(self, parent_id: Hashable, child_id: Hashable) -> Any: ...

    def release(self, seq_id: Hashable) -> Any: ...

    def take_copies(self) -> list[tuple[int, int]]: ...

    def block_ids(self, seq_id: Hashable) -> list[int] | None: ...

    def usage(self) -> MemoryUsage: ...


class Schedulable(Protocol):
    """A sequence as the scheduler sees it: an id and its tokens so far (the engine's is a
    :class:`~pagedkv_edu.core.request.Request`).

    It may also have ``token_ids`` (for the prefix cache) and ``num_seqs`` (the sequences it
    will become: ``n`` for a request that forks into ``n`` samples after its prefill). The
    scheduler keeps its state *on the record*: :meth:`Scheduler.add` sets ``status``,
    ``num_computed_tokens`` and ``prompt_end``, and every step updates them.
    """

    seq_id: Hashable
    status: Status
    num_computed_tokens: int
    prompt_end: int

    @property
    def num_tokens(self) -> int:
        """Tokens whose K/V must be in memory before it can sample its next token."""


def token_ids_of(seq: Schedulable) -> Sequence[int] | None:
    """The sequence's token ids if it has them (the engine's requests), else None."""
    return getattr(seq, "token_ids", None)


def seats_of(seq: Schedulable) -> int:
    """Places it takes under ``max_num_seqs``: every sample of an ``n > 1`` request counts."""
    return getattr(seq, "num_seqs", 1)


class ScheduledSeq(NamedTuple):
    """One sequence's share of a step. Immutable; a NamedTuple because one is built per sequence per step
    (a frozen dataclass costs four times as much to build)."""

    seq: Schedulable
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
    """One step's decisions: what runs, what was preempted or failed, which blocks to copy first.

    The runner applies the copies in this order, before the forward pass: ``swap_out`` (a
    victim's blocks to the host, read before anything reuses them), ``copies``
    (copy-on-write), ``swap_in`` (host blocks back into fresh device blocks).
    """

    scheduled: list[ScheduledSeq] = field(default_factory=list)
    admitted: list[Schedulable] = field(default_factory=list)    # admitted in this step (swapped back in included)
    preempted: list[Schedulable] = field(default_factory=list)   # released or swapped out, back at the queue's front
    failed: list[Schedulable] = field(default_factory=list)      # can never fit: removed, with a reason
    copies: list[tuple[int, int]] = field(default_factory=list)  # copy-on-write (source, destination) blocks
    swap_out: list[tuple[int, int]] = field(default_factory=list)   # (device block, host block) copies
    swap_in: list[tuple[int, int]] = field(default_factory=list)    # (host block, device block) copies

    @property
    def prefills(self) -> list[Schedulable]:
        """Sequences computing (a chunk of) their prompt in this step."""
        return [s.seq for s in self.scheduled if s.is_prefill]

    @property
    def decodes(self) -> list[Schedulable]:
        """Sequences bringing the one token they sampled last step."""
        return [s.seq for s in self.scheduled if not s.is_prefill]

    @property
    def swapped_out(self) -> list[Schedulable]:
        """The preempted whose K/V went to host memory (the others will be recomputed)."""
        return [s for s in self.preempted if s.status is Status.SWAPPED]

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


def _index(seqs: Sequence[Any], seq: Any) -> int | None:
    """Where ``seq`` itself is in ``seqs`` (by identity: two records with equal fields are two sequences)."""
    return next((i for i, s in enumerate(seqs) if s is seq), None)


class Scheduler:
    """Grow the running (preempting the newest), then admit first come first served, under a token budget.

    ``max_num_seqs`` caps the running sequences (each sample of an ``n > 1`` request counts);
    ``max_num_batched_tokens`` caps the tokens computed per step (None: no cap, every prompt
    is prefilled whole). ``preemption_mode="swap"`` needs paged memory with a swap space; a
    victim that does not fit in it is recomputed instead.
    """

    def __init__(self, memory: KVMemory, max_num_seqs: int | None = None,
                 max_num_batched_tokens: int | None = None, preemption_mode: str = "recompute") -> None:
        for name, value in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens)):
            if value is not None:
                check_whole(name, value, 1)
        if preemption_mode not in PREEMPTION_MODES:
            raise ValueError(f"unknown preemption_mode {preemption_mode!r}; choose one of {PREEMPTION_MODES}")
        if preemption_mode == "swap" and getattr(memory, "swap", None) is None:
            raise ValueError("preemption_mode='swap' needs paged memory with a swap space (BlockManager(..., swap=))")
        self.memory = memory
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.preemption_mode = preemption_mode
        self.waiting: deque[Schedulable] = deque()
        self.running: list[Schedulable] = []
        self.num_preemptions = 0
        self.num_swaps = 0
        self.counts = TokenCounts()
        self._forked: list[Schedulable] = []   # forked children whose whole table the runner has not had yet

    def add(self, seq: Schedulable) -> None:
        """Queue a sequence; refuses one that could never fit, before anything changes."""
        if not self.memory.fits_ever(seq.num_tokens):
            raise ValueError(f"sequence {seq.seq_id!r}: {seq.num_tokens} tokens can never fit in this KV memory")
        if _index(self.waiting, seq) is not None or _index(self.running, seq) is not None:
            raise ValueError(f"sequence {seq.seq_id!r} is already queued or running")
        seq.status, seq.num_computed_tokens, seq.prompt_end = Status.WAITING, 0, 0
        self.waiting.append(seq)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def preempted(self) -> list[Schedulable]:
        """Waiting sequences that ran before and were preempted (recomputed or swapped back in)."""
        return [s for s in self.waiting if s.status in (Status.PREEMPTED, Status.SWAPPED)]

    def num_computed_tokens(self, seq: Schedulable) -> int:
        """Tokens of a running sequence whose K/V are in memory (after this step's forward pass)."""
        return seq.num_computed_tokens

    def schedule(self) -> ScheduledStep:
        """Decide one step: grow the running sequences, then admit what fits in memory and budget."""
        step = ScheduledStep()
        budget = self.max_num_batched_tokens if self.max_num_batched_tokens is not None else float("inf")
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            computed = seq.num_computed_tokens
            new = int(min(seq.num_tokens - computed, budget))
            if new <= 0:
                i += 1
                continue
            while not self.memory.can_grow(seq.seq_id, new):
                victim = self.running[-1]
                if victim is seq and len(self.running) == 1:   # it has all the memory and still cannot grow
                    self._remove(seq)
                    step.failed.append(seq)
                    break
                self._preempt(victim, step)
                if victim is seq:
                    break
            if seq.status is not Status.RUNNING:
                continue
            self._schedule(step, seq, computed, new, self.memory.grow(seq.seq_id, new))
            budget -= new
            i += 1

        while self.waiting and budget > 0 and not step.preempted:   # memory ran short this step: admit nobody
            seq = self.waiting[0]
            if not self.memory.fits_ever(seq.num_tokens):   # grew past the whole memory while it ran
                self._fail_waiting(step)
                continue
            if self.max_num_seqs is not None and sum(map(seats_of, self.running)) + seats_of(seq) > self.max_num_seqs:
                break
            if seq.status is Status.SWAPPED:
                brought = self._swap_in(seq, step, budget)
                if brought is None:
                    break
                budget -= brought
                continue
            hashes = self.memory.block_hashes(seq)
            tokens = None if hashes is None else token_ids_of(seq)   # a memory without hashes never reads ids
            cached = self.memory.cached_prefix(tokens, hashes)
            upto = cached + int(min(seq.num_tokens - cached, budget))
            head = None if tokens is None else tokens[:upto]
            if not self.memory.can_admit(seq.seq_id, upto, head, hashes):
                if not self.running:
                    self._fail_waiting(step)
                    continue
                break
            self.waiting.popleft()
            cached = self.memory.admit(seq.seq_id, upto, head, hashes)
            if seq.status is Status.PREEMPTED:
                self.counts.resumed_hit_tokens += cached
            else:
                self.counts.prompt_tokens += seq.num_tokens
                self.counts.prefix_hit_tokens += cached
            self.running.append(seq)
            seq.status, seq.prompt_end = Status.RUNNING, seq.num_tokens
            step.admitted.append(seq)
            self._schedule(step, seq, cached, upto - cached, None)
            budget -= upto - cached
        step.copies = self.memory.take_copies()
        return step

    def _swap_in(self, seq: Schedulable, step: ScheduledStep, budget: float) -> int | None:
        """Bring a swapped sequence back with its next tokens; the tokens scheduled, None if it must wait."""
        computed = seq.num_computed_tokens
        new = int(min(seq.num_tokens - computed, budget))
        if not self.memory.can_swap_in(seq.seq_id, computed + new):
            if self.running:
                return None
            self._fail_waiting(step)    # alone and still too big: cannot happen once fits_ever held
            return 0
        self.waiting.popleft()
        step.swap_in += self.memory.swap_in(seq.seq_id)
        self.memory.grow(seq.seq_id, new)
        self.running.append(seq)
        seq.status = Status.RUNNING
        step.admitted.append(seq)
        self._schedule(step, seq, computed, new, None)
        return new

    def _fail_waiting(self, step: ScheduledStep) -> None:
        seq = self.waiting.popleft()
        if seq.status is Status.SWAPPED:
            self.memory.release(seq.seq_id)
        seq.status = Status.FINISHED
        step.failed.append(seq)

    def _schedule(self, step: ScheduledStep, seq: Schedulable, computed: int, new: int,
                  grown: list[int] | None) -> None:
        """Schedule ``new`` tokens after ``computed``; ``grown``: the ids its table gained (None: a fresh row)."""
        seq.num_computed_tokens = computed + new
        self.memory.scheduled(seq, computed)
        is_prefill = computed < seq.prompt_end
        self.counts.prefill_tokens += new if is_prefill else 0
        table = self.memory.block_ids(seq.seq_id) or ()
        fork = _index(self._forked, seq) if self._forked else None   # a fork is rare: skip the scan
        if fork is not None:
            del self._forked[fork]
        if grown is None or fork is not None:
            ids, at = tuple(table), 0
        else:
            ids, at = tuple(grown), len(table) - len(grown)
        step.scheduled.append(ScheduledSeq(seq, new, computed, is_prefill, computed + new == seq.num_tokens, ids, at))

    def fork(self, parent: Schedulable, child: Schedulable) -> None:
        """Run ``child`` beside its running ``parent``, sharing its memory; it is now the newest sequence."""
        if _index(self.running, parent) is None:
            raise ValueError(f"sequence {parent.seq_id!r} is not running; only a running sequence can be forked")
        if self.max_num_seqs is not None and sum(map(seats_of, self.running)) + seats_of(child) > self.max_num_seqs:
            raise ValueError(f"forking {child.seq_id!r} would run more than max_num_seqs={self.max_num_seqs} sequences")
        self.memory.fork(parent.seq_id, child.seq_id)
        self.running.append(child)
        self._forked.append(child)
        child.status, child.num_computed_tokens, child.prompt_end = (Status.RUNNING, parent.num_computed_tokens,
                                                                     parent.prompt_end)

    def finish(self, seq: Schedulable, *, release: bool = True) -> None:
        """A running sequence is done: give its memory back.

        ``release=False`` keeps its memory (its block table stays readable) for a caller that
        inspects it afterwards and releases it itself (``memory.release``), as chapter 5's
        static :func:`~pagedkv_edu.engine.generate.generate` does.
        """
        if _index(self.running, seq) is None:
            raise ValueError(f"sequence {seq.seq_id!r} is not running")
        self._remove(seq, release)

    def abort(self, seq: Schedulable) -> None:
        """Remove a sequence wherever it is (running, waiting, swapped out), giving back what it holds."""
        if _index(self.running, seq) is not None:
            self._remove(seq)
            return
        i = _index(self.waiting, seq)
        if i is None:
            raise ValueError(f"sequence {seq.seq_id!r} is neither running nor waiting")
        del self.waiting[i]
        if seq.status is Status.SWAPPED:
            self.memory.release(seq.seq_id)
        seq.status = Status.FINISHED

    def _remove(self, seq: Schedulable, release: bool = True) -> None:
        del self.running[_index(self.running, seq)]
        self._forget_fork(seq)
        if release:
            self.memory.release(seq.seq_id)
        seq.status = Status.FINISHED

    def _forget_fork(self, seq: Schedulable) -> None:
        i = _index(self._forked, seq)
        if i is not None:
            del self._forked[i]

    def _preempt(self, victim: Schedulable, step: ScheduledStep) -> None:
        del self.running[_index(self.running, victim)]
        self._forget_fork(victim)
        if self.preemption_mode == "swap" and self.memory.can_swap_out(victim.seq_id):
            step.swap_out += self.memory.swap_out(victim.seq_id)
            victim.status = Status.SWAPPED    # keeps num_computed_tokens: its K/V come back
            self.num_swaps += 1
        else:
            self.memory.release(victim.seq_id)
            victim.status, victim.num_computed_tokens = Status.PREEMPTED, 0
        self.waiting.appendleft(victim)
        step.preempted.append(victim)
        self.num_preemptions += 1
