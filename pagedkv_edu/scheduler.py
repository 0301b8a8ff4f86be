"""The scheduler: which requests run this step, and who gives memory back when it runs out.

Continuous batching (Orca's iteration-level scheduling) decides anew at every step. This
scheduler is the one in nano-vllm and vLLM, reduced to its memory logic:

1. **Admit** waiting sequences first come, first served, while the memory says their known
   tokens fit (for paged memory: their blocks plus a small watermark of free blocks). The
   head of the queue blocks the ones behind it, so nobody starves.
2. **Grow** every other running sequence by one token (a decode step). When memory runs
   out, **preempt** the most recently admitted sequence: release its memory and put it back
   at the front of the queue. It keeps its tokens and is recomputed when readmitted.

The scheduler never looks at a model. Chapter 1-2's simulation and chapter 6's engine drive
the same scheduler, with the contiguous arena or the block manager as its memory.

Chapters 7 and 8 add two things. A sequence that knows its token ids (the engine's do) passes them
at admission, so paged memory with a prefix cache counts only the blocks the sequence really
takes: cached blocks in use cost nothing, cached free ones come out of the free queue (vLLM
v1's ``get_num_blocks_to_allocate``). A sequence admitted later in the same step may share
blocks that an earlier one will compute in this step's forward pass; preempting newest first
releases the later one first, which is what keeps that safe (see the block manager). And a
running sequence can be **forked**: the child shares its blocks and runs from the next step
on, as the newest sequence.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .block_manager import BlockManager
from .block_table import blocks_needed
from .contiguous import ContiguousArena


class KVMemory(Protocol):
    """What the scheduler asks of a KV memory: room to admit, room to grow, and release."""

    def fits_ever(self, num_tokens: int) -> bool:
        """Could a sequence of ``num_tokens`` fit if it had the memory to itself?"""

    def can_admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None) -> bool: ...

    def admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None) -> None: ...

    def can_grow(self, seq_id: Hashable) -> bool: ...

    def grow(self, seq_id: Hashable) -> None: ...

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None: ...

    def release(self, seq_id: Hashable) -> None: ...


class PagedMemory:
    """Blocks on demand from a :class:`BlockManager`, keeping ``watermark_blocks`` free at admission."""

    def __init__(self, manager: BlockManager, watermark_blocks: int = 0) -> None:
        if watermark_blocks < 0:
            raise ValueError(f"watermark_blocks must be >= 0, got {watermark_blocks}")
        self.manager = manager
        self.watermark_blocks = watermark_blocks

    def fits_ever(self, num_tokens: int) -> bool:
        return blocks_needed(num_tokens, self.manager.block_size) <= self.manager.pool.num_blocks

    def can_admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None) -> bool:
        # The watermark protects running sequences' growth; with none running there is nothing to protect.
        return self.manager.can_allocate(num_tokens, self.watermark_blocks if self.manager.tables else 0, token_ids)

    def admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None) -> None:
        self.manager.add_sequence(seq_id, num_tokens, token_ids)

    def can_grow(self, seq_id: Hashable) -> bool:
        return self.manager.can_append(seq_id)

    def grow(self, seq_id: Hashable) -> None:
        self.manager.append_tokens(seq_id)

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        self.manager.fork(parent_id, child_id)

    def release(self, seq_id: Hashable) -> None:
        self.manager.finish(seq_id)


class ContiguousMemory:
    """One first-fit reservation per sequence in a :class:`ContiguousArena`, sized by ``reservation``.

    ``reservation(seq_id, num_tokens)`` returns the slots to reserve; a real system can only
    reserve ``max_seq_len`` since it does not know the output length.
    """

    def __init__(self, arena: ContiguousArena, reservation: Callable[[Hashable, int], int]) -> None:
        self.arena = arena
        self.reservation = reservation
        self.lengths: dict[Hashable, int] = {}

    def fits_ever(self, num_tokens: int) -> bool:
        return num_tokens <= self.arena.capacity

    def can_admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None) -> bool:
        return self.arena.fits(self.reservation(seq_id, num_tokens))

    def admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None) -> None:
        self.arena.allocate(seq_id, self.reservation(seq_id, num_tokens))
        self.lengths[seq_id] = num_tokens

    def can_grow(self, seq_id: Hashable) -> bool:
        return self.lengths[seq_id] < self.arena.extent(seq_id).size

    def grow(self, seq_id: Hashable) -> None:
        if not self.can_grow(seq_id):
            raise ValueError(f"sequence {seq_id!r} has filled its reservation of {self.arena.extent(seq_id).size} slots")
        self.lengths[seq_id] += 1

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        raise ValueError("a contiguous reservation cannot be shared: forking needs paged memory")

    def release(self, seq_id: Hashable) -> None:
        self.arena.release(seq_id)
        del self.lengths[seq_id]


class Schedulable(Protocol):
    """A sequence as the scheduler sees it."""

    seq_id: Hashable

    @property
    def num_tokens(self) -> int:
        """Tokens whose K/V must be in memory when it runs: prompt plus everything generated."""


def token_ids_of(seq: Schedulable) -> Sequence[int] | None:
    """The sequence's token ids if it has them (the engine's requests), else None (the simulator's)."""
    return getattr(seq, "token_ids", None)


@dataclass
class ScheduledStep:
    """One step's decisions."""

    prefills: list[Schedulable] = field(default_factory=list)   # admitted now: compute all their tokens
    decodes: list[Schedulable] = field(default_factory=list)    # running: one new token each
    preempted: list[Schedulable] = field(default_factory=list)  # released, back at the queue's front
    failed: list[Schedulable] = field(default_factory=list)     # can never fit: removed, with a reason

    @property
    def is_empty(self) -> bool:
        return not (self.prefills or self.decodes)


class Scheduler:
    """First come, first served admission; preemption of the newest by recompute."""

    def __init__(self, memory: KVMemory, max_num_seqs: int | None = None) -> None:
        if max_num_seqs is not None and max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1 or None, got {max_num_seqs}")
        self.memory = memory
        self.max_num_seqs = max_num_seqs
        self.waiting: deque[Schedulable] = deque()
        self.running: list[Schedulable] = []
        self.num_preemptions = 0

    def add(self, seq: Schedulable) -> None:
        """Queue a sequence; refuses one that could never fit, before anything changes."""
        if not self.memory.fits_ever(seq.num_tokens):
            raise ValueError(f"sequence {seq.seq_id!r}: {seq.num_tokens} tokens can never fit in this KV memory")
        self.waiting.append(seq)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledStep:
        """Admit what fits, then grow every other running sequence by one token."""
        step = ScheduledStep()
        while self.waiting and (self.max_num_seqs is None or len(self.running) < self.max_num_seqs):
            seq = self.waiting[0]
            tokens = token_ids_of(seq)
            if not self.memory.can_admit(seq.seq_id, seq.num_tokens, tokens):
                if not self.running and not step.prefills:
                    # It does not fit even in empty memory (it grew past it while running): fail it.
                    step.failed.append(self.waiting.popleft())
                    continue
                break
            self.waiting.popleft()
            self.memory.admit(seq.seq_id, seq.num_tokens, tokens)
            self.running.append(seq)
            step.prefills.append(seq)

        admitted = {id(s) for s in step.prefills}
        for seq in list(self.running):
            if id(seq) in admitted or seq not in self.running:
                continue
            while not self.memory.can_grow(seq.seq_id):
                victim = self.running[-1]
                self._preempt(victim, step)
                if victim is seq:
                    break
            if seq in self.running:
                self.memory.grow(seq.seq_id)
                step.decodes.append(seq)
        return step

    def fork(self, parent: Schedulable, child: Schedulable) -> None:
        """Run ``child`` beside its running ``parent``, sharing its memory; it is now the newest sequence."""
        if parent not in self.running:
            raise ValueError(f"sequence {parent.seq_id!r} is not running; only a running sequence can be forked")
        self.memory.fork(parent.seq_id, child.seq_id)
        self.running.append(child)

    def finish(self, seq: Schedulable) -> None:
        """A running sequence is done: give its memory back."""
        self.running.remove(seq)
        self.memory.release(seq.seq_id)

    def _preempt(self, victim: Schedulable, step: ScheduledStep) -> None:
        self.running.remove(victim)
        self.memory.release(victim.seq_id)
        if victim in step.prefills:
            step.prefills.remove(victim)
        if victim in step.decodes:
            step.decodes.remove(victim)
        self.waiting.appendleft(victim)
        step.preempted.append(victim)
        self.num_preemptions += 1
