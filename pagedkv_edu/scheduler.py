"""The scheduler: it owns the KV memory and decides, every step, which tokens of which sequences run.

Continuous batching (Orca's iteration-level scheduling) decides anew at every step. This
scheduler is vLLM v1's, reduced to its memory logic, and it is the only place in the package
where memory is taken or given back: the engine, :func:`~pagedkv_edu.generate.generate` and
the memory-only :func:`~pagedkv_edu.simulate.simulate` all drive it, so utilisation, waste,
prefix hits and preemptions are counted once, here and in the memory it owns.

A sequence is a list of tokens, ``num_tokens`` long; the scheduler remembers how many of
them already have their K/V in memory (``num_computed_tokens``). Each step:

1. **Grow the running sequences first**, oldest first: each brings its uncomputed tokens
   (one for a decode; the next chunk for a prompt being prefilled in chunks). When memory runs
   out, **preempt** the most recently admitted running sequence: release its memory and put it
   back at the front of the queue. It keeps its tokens and is recomputed when readmitted
   (or, with ``preemption_mode="swap"``, its blocks are copied to host memory and back:
   :mod:`pagedkv_edu.swap`, chapter 9).
2. **Then admit** waiting sequences, first come first served, while the memory says their
   tokens fit (paged: their blocks plus a small watermark of free blocks, kept for the running
   sequences' growth). The head of the queue blocks the ones behind it, so nobody starves; a
   step that had to preempt admits nobody (memory is short: the preempted go first next time).

Growing before admitting means a sequence admitted in a step is never preempted in that same
step (the order vLLM v1 uses). Both phases share one **token budget** per step
(``max_num_batched_tokens``): a prompt longer than what is left is prefilled in chunks over
several steps (chunked prefill), and decodes are never starved by a long prompt. A step is
a mixed batch: some sequences bring one token, others a chunk of a prompt.

Chapters 7 and 8 add two things. A sequence that knows its token ids (the engine's do) passes them
at admission, so paged memory with a prefix cache starts it from its longest cached prefix
and counts only the blocks it really takes. Blocks are registered in the cache as soon as
their tokens are scheduled, so a sequence admitted later in the same step can share them: the
forward pass writes a layer's K/V for the whole batch before any of it attends. And a running
sequence can be **forked**: the child shares its blocks and runs from the next step on, as
the newest sequence.

Every sequence's scheduling state (``status``, ``num_computed_tokens``, ``prompt_end``) lives
on its own record (:class:`~pagedkv_edu.engine.request.Request`), found by identity, never by
value. The scheduler never looks at a model. What it emits, a :class:`ScheduledStep`, says which
sequences run, how many new tokens each brings, where their K/V go (block tables, or the
start of a contiguous reservation) and which copy-on-write block copies to make first.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .block_manager import BlockManager
from .block_table import blocks_needed
from .specs import hit_rate, utilisation
from .checks import check_whole
from .contiguous import ContiguousArena
from .swap import SwapSpace

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


@dataclass(frozen=True)
class MemoryUsage:
    """What the KV memory holds now, in token slots; a shared block counts once."""

    stored_tokens: int   # slots holding a token's K/V
    held_slots: int      # slots taken by sequences (allocated blocks, or reservations)
    capacity: int        # every slot of the memory

    @property
    def utilisation(self) -> float:
        """Of the held slots, the share holding tokens (1.0 when nothing is held)."""
        return utilisation(self.stored_tokens, self.held_slots)

    @property
    def usage(self) -> float:
        """Share of the memory held by sequences (vLLM's ``1 - free/total``)."""
        return self.held_slots / self.capacity


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
    """What the scheduler asks of a KV memory: room to admit, room to grow, and release.

    ``hashes`` (optional everywhere) are the sequence's full-block hash chain, computed once on
    its record (:meth:`block_hashes`), so that no call hashes its tokens again.
    """

    def fits_ever(self, num_tokens: int) -> bool:
        """Could a sequence of ``num_tokens`` fit if it had the memory to itself?"""

    def block_hashes(self, seq: "Schedulable") -> Sequence[bytes] | None:
        """The sequence's full-block hash chain when a prefix cache needs it, else None."""

    def cached_prefix(self, token_ids: Sequence[int] | None, hashes: Sequence[bytes] | None = None) -> int:
        """Tokens of a new sequence its memory holds already (a prefix-cache hit), 0 without."""

    def can_admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None,
                  hashes: Sequence[bytes] | None = None) -> bool: ...

    def admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None,
              hashes: Sequence[bytes] | None = None) -> int:
        """Take memory for the first ``num_tokens`` tokens; returns how many were found cached."""

    def can_grow(self, seq_id: Hashable, n: int = 1) -> bool: ...

    def grow(self, seq_id: Hashable, n: int = 1) -> None: ...

    def scheduled(self, seq: "Schedulable") -> None:
        """The sequence's tokens in memory will be computed by this step (the prefix cache may register them)."""

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None: ...

    def release(self, seq_id: Hashable) -> None: ...

    def take_copies(self) -> list[tuple[int, int]]: ...

    def block_ids(self, seq_id: Hashable) -> list[int] | None: ...

    def kv_start(self, seq_id: Hashable) -> int | None: ...

    def usage(self) -> MemoryUsage: ...


class PagedMemory:
    """Blocks on demand from a :class:`BlockManager`, keeping ``watermark_blocks`` free at admission.

    With a :class:`~pagedkv_edu.swap.SwapSpace` it can also swap a preempted sequence's blocks
    out to host memory and back in (:meth:`swap_out`, :meth:`swap_in`).
    """

    def __init__(self, manager: BlockManager, watermark_blocks: int = 0, swap: SwapSpace | None = None) -> None:
        check_whole("watermark_blocks", watermark_blocks)
        if swap is not None and swap.block_size != manager.block_size:
            raise ValueError(f"the swap space's blocks hold {swap.block_size} tokens, the pool's {manager.block_size}")
        self.manager = manager
        self.watermark_blocks = watermark_blocks
        self.swap = swap

    def fits_ever(self, num_tokens: int) -> bool:
        return blocks_needed(num_tokens, self.manager.block_size) <= self.manager.pool.num_blocks

    def block_hashes(self, seq: "Schedulable") -> Sequence[bytes] | None:
        cache, tokens = self.manager.prefix_cache, token_ids_of(seq)
        if cache is None or tokens is None:
            return None
        if hasattr(seq, "hashes"):   # the engine's record hashes each block once in its life
            return seq.hashes(self.manager.block_size, cache.hash_fn)
        return cache.chain(tokens)

    def cached_prefix(self, token_ids: Sequence[int] | None, hashes: Sequence[bytes] | None = None) -> int:
        cache = self.manager.prefix_cache
        return 0 if cache is None or token_ids is None else cache.lookup(token_ids, hashes).num_tokens

    def can_admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None,
                  hashes: Sequence[bytes] | None = None) -> bool:
        # The watermark protects running sequences' growth; with none running there is nothing to protect.
        return self.manager.can_allocate(num_tokens, self.watermark_blocks if self.manager.tables else 0, token_ids,
                                         hashes)

    def admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None,
              hashes: Sequence[bytes] | None = None) -> int:
        self.manager.add_sequence(seq_id, num_tokens, token_ids, hashes)
        return self.manager.num_cached_tokens(seq_id)

    def can_grow(self, seq_id: Hashable, n: int = 1) -> bool:
        return self.manager.can_append(seq_id, n)

    def grow(self, seq_id: Hashable, n: int = 1) -> None:
        self.manager.append_tokens(seq_id, n)

    def scheduled(self, seq: "Schedulable") -> None:
        # Register the blocks that filled (all of them, for a sequence just admitted): findable from now on.
        m = self.manager
        if m.prefix_cache is None or m.num_hashed_blocks(seq.seq_id) == m.table(seq.seq_id).num_tokens // m.block_size:
            return
        tokens = token_ids_of(seq)
        if tokens is not None:
            m.mark_computed(seq.seq_id, tokens, self.block_hashes(seq))

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        self.manager.fork(parent_id, child_id)

    def release(self, seq_id: Hashable) -> None:
        if self.swap is not None and seq_id in self.swap.tables:
            self.swap.drop(seq_id)
        else:
            self.manager.finish(seq_id)

    def take_copies(self) -> list[tuple[int, int]]:
        return self.manager.take_copies()

    def block_ids(self, seq_id: Hashable) -> list[int] | None:
        return self.manager.table(seq_id).block_ids

    def kv_start(self, seq_id: Hashable) -> int | None:
        return None

    def usage(self) -> MemoryUsage:
        m = self.manager
        return MemoryUsage(m.num_stored_tokens, m.pool.num_used * m.block_size, m.pool.capacity_tokens)

    # --- swapping (chapter 9) ------------------------------------------------------------
    def can_swap_out(self, seq_id: Hashable) -> bool:
        return self.swap is not None and self.swap.can_swap_out(self.manager.table(seq_id).num_tokens)

    def swap_out(self, seq_id: Hashable) -> list[tuple[int, int]]:
        """Move the sequence's blocks to host blocks; returns the (device, host) copies, to make before any write."""
        assert self.swap is not None
        table = self.manager.table(seq_id)
        pairs = self.swap.swap_out(seq_id, list(table.block_ids), table.num_tokens)
        self.manager.finish(seq_id)
        return pairs

    def can_swap_in(self, seq_id: Hashable, num_tokens: int) -> bool:
        """Room for the swapped tokens plus ``num_tokens - swapped`` new ones, and the watermark."""
        watermark = self.watermark_blocks if self.manager.tables else 0
        return blocks_needed(num_tokens, self.manager.block_size) + watermark <= self.manager.pool.num_free

    def swap_in(self, seq_id: Hashable) -> tuple[int, list[tuple[int, int]]]:
        """Fresh blocks for a swapped sequence; returns its tokens in memory and the (host, device) copies."""
        assert self.swap is not None
        num_tokens = self.swap.num_tokens(seq_id)
        table = self.manager.add_sequence(seq_id, num_tokens)
        return num_tokens, self.swap.swap_in(seq_id, table.block_ids)


class ContiguousMemory:
    """One first-fit reservation per sequence in a :class:`ContiguousArena`, sized by ``reservation``.

    ``reservation(seq_id, num_tokens)`` returns the slots to reserve; a real system can only
    reserve ``max_seq_len`` since it does not know the output length. Token ``p`` of a
    sequence lives at slot ``start + p`` of the arena: a model's contiguous store is one
    tensor of ``capacity`` slots addressed that way.
    """

    swap = None

    def __init__(self, arena: ContiguousArena, reservation: Callable[[Hashable, int], int]) -> None:
        self.arena = arena
        self.reservation = reservation
        self.lengths: dict[Hashable, int] = {}

    def fits_ever(self, num_tokens: int) -> bool:
        return num_tokens <= self.arena.capacity

    def block_hashes(self, seq: "Schedulable") -> Sequence[bytes] | None:
        return None

    def cached_prefix(self, token_ids: Sequence[int] | None, hashes: Sequence[bytes] | None = None) -> int:
        return 0

    def can_admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None,
                  hashes: Sequence[bytes] | None = None) -> bool:
        size = self.reservation(seq_id, num_tokens)
        return num_tokens <= size and self.arena.fits(size)

    def admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None,
              hashes: Sequence[bytes] | None = None) -> int:
        self.arena.allocate(seq_id, self.reservation(seq_id, num_tokens))
        self.lengths[seq_id] = num_tokens
        return 0

    def can_grow(self, seq_id: Hashable, n: int = 1) -> bool:
        return self.lengths[seq_id] + n <= self.arena.extent(seq_id).size

    def grow(self, seq_id: Hashable, n: int = 1) -> None:
        if not self.can_grow(seq_id, n):
            raise ValueError(f"sequence {seq_id!r} has filled its reservation of {self.arena.extent(seq_id).size} slots")
        self.lengths[seq_id] += n

    def scheduled(self, seq: "Schedulable") -> None:
        pass

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        raise ValueError("a contiguous reservation cannot be shared: forking needs paged memory")

    def release(self, seq_id: Hashable) -> None:
        self.arena.release(seq_id)
        del self.lengths[seq_id]

    def take_copies(self) -> list[tuple[int, int]]:
        return []

    def block_ids(self, seq_id: Hashable) -> list[int] | None:
        return None

    def kv_start(self, seq_id: Hashable) -> int | None:
        return self.arena.extent(seq_id).start

    def usage(self) -> MemoryUsage:
        return MemoryUsage(sum(self.lengths.values()), self.arena.reserved, self.arena.capacity)


class Schedulable(Protocol):
    """A sequence as the scheduler sees it: an id and its tokens so far (the engine's is a
    :class:`~pagedkv_edu.engine.request.Request`).

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


@dataclass(frozen=True)
class ScheduledSeq:
    """One sequence's share of a step."""

    seq: Schedulable
    num_new_tokens: int          # tokens computed in this step
    num_computed_tokens: int     # tokens whose K/V were in memory before it (a cached prefix included)
    is_prefill: bool             # it is computing its prompt (or recomputing after a preemption)
    samples: bool                # the step reaches its last token: its logits give the next token
    block_ids: list[int] | None  # its block table after this step's growth (paged); a copy, later steps leave it
    kv_start: int | None         # the first slot of its reservation (contiguous)

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
            raise ValueError("preemption_mode='swap' needs paged memory with a swap space (PagedMemory(..., swap=))")
        self.memory = memory
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.preemption_mode = preemption_mode
        self.waiting: deque[Schedulable] = deque()
        self.running: list[Schedulable] = []
        self.num_preemptions = 0
        self.num_swaps = 0
        self.counts = TokenCounts()

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
            self.memory.grow(seq.seq_id, new)
            self._schedule(step, seq, computed, new)
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
            tokens = token_ids_of(seq)
            hashes = self.memory.block_hashes(seq)
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
            self._schedule(step, seq, cached, upto - cached)
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
        _, pairs = self.memory.swap_in(seq.seq_id)
        step.swap_in += pairs
        self.memory.grow(seq.seq_id, new)
        self.running.append(seq)
        seq.status = Status.RUNNING
        step.admitted.append(seq)
        self._schedule(step, seq, computed, new)
        return new

    def _fail_waiting(self, step: ScheduledStep) -> None:
        seq = self.waiting.popleft()
        if seq.status is Status.SWAPPED:
            self.memory.release(seq.seq_id)
        seq.status = Status.FINISHED
        step.failed.append(seq)

    def _schedule(self, step: ScheduledStep, seq: Schedulable, computed: int, new: int) -> None:
        seq.num_computed_tokens = computed + new
        self.memory.scheduled(seq)
        is_prefill = computed < seq.prompt_end
        self.counts.prefill_tokens += new if is_prefill else 0
        ids = self.memory.block_ids(seq.seq_id)
        step.scheduled.append(ScheduledSeq(
            seq, new, computed, is_prefill=is_prefill,
            samples=computed + new == seq.num_tokens,
            block_ids=None if ids is None else list(ids), kv_start=self.memory.kv_start(seq.seq_id)))

    def fork(self, parent: Schedulable, child: Schedulable) -> None:
        """Run ``child`` beside its running ``parent``, sharing its memory; it is now the newest sequence."""
        if _index(self.running, parent) is None:
            raise ValueError(f"sequence {parent.seq_id!r} is not running; only a running sequence can be forked")
        if self.max_num_seqs is not None and sum(map(seats_of, self.running)) + seats_of(child) > self.max_num_seqs:
            raise ValueError(f"forking {child.seq_id!r} would run more than max_num_seqs={self.max_num_seqs} sequences")
        self.memory.fork(parent.seq_id, child.seq_id)
        self.running.append(child)
        child.status, child.num_computed_tokens, child.prompt_end = (Status.RUNNING, parent.num_computed_tokens,
                                                                     parent.prompt_end)

    def finish(self, seq: Schedulable, *, release: bool = True) -> None:
        """A running sequence is done: give its memory back.

        ``release=False`` keeps its memory (its block table stays readable) for a caller that
        inspects it afterwards and releases it itself (``memory.release``), as chapter 5's
        static :func:`~pagedkv_edu.generate.generate` does.
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
        if release:
            self.memory.release(seq.seq_id)
        seq.status = Status.FINISHED

    def _preempt(self, victim: Schedulable, step: ScheduledStep) -> None:
        del self.running[_index(self.running, victim)]
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
