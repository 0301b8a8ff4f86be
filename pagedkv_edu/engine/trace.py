"""A step-by-step record of a live engine: what every block and queue held after each step.

Chapter 2's explorer drives a toy block manager by hand. To *watch* a real run, the 50
consultants on SmolLM2, the engine records one compact :class:`Frame` per step when it is
given an :class:`EngineTrace` (``LLMEngine(..., trace=EngineTrace())``; off by default, since
it costs a copy of the pool's reference counts per step). A frame holds what the views need
to redraw that moment without the engine:

* every block's reference count, and which blocks the prefix cache can find (``cached``);
* every live sequence's block table and token count; for contiguous memory, every reservation
  (where it starts, its size, and how many of its slots hold tokens), whose empty tails are the
  waste paging removes;
* the step's token budget: how many prefill and decode tokens it computed, of how many allowed;
* the waiting queue split in two: requests that never ran, and requests preempted and waiting
  to be recomputed; the running batch in admission order;
* the step's events: admitted, preempted, finished, copy-on-write copies made;
* how many tokens each sequence has generated so far. The text is decoded on demand
  (:meth:`EngineTrace.text`), so recording stays cheap: decoding every sequence at every step
  would cost more than a small model's decode step.

The trace is data, not a view: ``viz.replay`` draws it, and the engine never imports a view.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..checks import check_whole


class _Traced(Protocol):
    """A sequence as the trace reads it (the engine's ``Request``)."""

    seq_id: Hashable
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    num_preemptions: int


@dataclass(frozen=True)
class TableEntry:
    """One live sequence's block table after a step."""

    seq_id: Hashable
    num_tokens: int
    block_ids: tuple[int, ...]


@dataclass(frozen=True)
class Reservation:
    """One contiguous reservation after a step: ``size`` slots from ``start``, ``num_tokens`` of them filled."""

    seq_id: Hashable
    start: int
    size: int
    num_tokens: int


@dataclass(frozen=True)
class Frame:
    """The engine after one step, as plain immutable data."""

    step: int
    block_size: int
    ref_counts: tuple[int, ...]              # per physical block; 0 = free
    cached: frozenset[int]                   # blocks the prefix cache can find (in use or free)
    free_order: tuple[int, ...]              # the pool's free queue, next to be allocated first
    tables: tuple[TableEntry, ...]           # live sequences, in the block manager's order
    running: tuple[Hashable, ...]            # the batch, oldest admission first
    waiting: tuple[Hashable, ...]            # queued, never run
    preempted: tuple[Hashable, ...]          # queued again after a preemption, to be recomputed
    admitted: tuple[Hashable, ...] = ()      # prefilled in this step
    preempted_now: tuple[Hashable, ...] = () # preempted in this step
    finished: tuple[Hashable, ...] = ()      # finished in this step
    copies: tuple[tuple[int, int], ...] = () # copy-on-write (source, destination) made in this step
    num_output: tuple[tuple[Hashable, int], ...] = ()   # tokens generated so far, every sequence seen
    prefill_tokens: int = 0                  # prompt tokens computed in this step (chunks and recomputation included)
    decode_tokens: int = 0                   # sampled tokens fed back in this step, one per decoding sequence
    token_budget: int | None = None          # the step's cap (max_num_batched_tokens); None: no cap
    reservations: tuple[Reservation, ...] = ()   # contiguous memory: every reservation, in arena order
    capacity: int = 0                        # contiguous memory: the arena's slots

    @property
    def num_slots_reserved(self) -> int:
        return sum(r.size for r in self.reservations)

    @property
    def num_blocks(self) -> int:
        return len(self.ref_counts)

    @property
    def num_used(self) -> int:
        return sum(1 for r in self.ref_counts if r)

    @property
    def num_shared(self) -> int:
        """Blocks referenced by more than one table: prefix sharing or forked samples."""
        return sum(1 for r in self.ref_counts if r > 1)

    def table(self, seq_id: Hashable) -> TableEntry | None:
        for entry in self.tables:
            if entry.seq_id == seq_id:
                return entry
        return None

    def outputs(self, seq_id: Hashable) -> int:
        """Tokens ``seq_id`` had generated after this step (0 if it had not started)."""
        return dict(self.num_output).get(seq_id, 0)


@dataclass
class EngineTrace:
    """The frames of one run, plus what is needed to show each sequence's text.

    ``max_frames`` bounds memory on a long run: recording stops (and ``truncated`` turns
    true) rather than silently dropping frames from the middle.
    """

    max_frames: int = 100_000
    frames: list[Frame] = field(default_factory=list)
    truncated: bool = False
    tokenizer: Any = None
    _sequences: dict[Hashable, _Traced] = field(default_factory=dict, repr=False)
    _decoded: dict[tuple[Hashable, int], str] = field(default_factory=dict, repr=False)
    _done: set[Hashable] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        check_whole("max_frames", self.max_frames, 1)

    def __len__(self) -> int:
        return len(self.frames)

    def __iter__(self) -> Iterator[Frame]:
        return iter(self.frames)

    def __getitem__(self, index: int) -> Frame:
        return self.frames[index]

    @property
    def seq_ids(self) -> list[Hashable]:
        """Every sequence the run saw, in the order it first appeared."""
        return list(self._sequences)

    # --- recording ----------------------------------------------------------------------
    def record(self, engine: Any, scheduled: Any, copies: Sequence[tuple[int, int]] = ()) -> None:
        """Append the frame of the step that just ran: the engine's one call per step.

        ``scheduled`` is the step's decisions (``prefills`` and ``preempted``); ``copies`` the
        copy-on-write pairs the step applied. Reads the engine; changes nothing in it.
        """
        if len(self.frames) >= self.max_frames:
            self.truncated = True
            return
        if self.tokenizer is None:
            self.tokenizer = getattr(engine, "tokenizer", None)
        scheduler = engine.scheduler
        manager = scheduler.memory
        contiguous = getattr(engine, "policy", "paged") == "contiguous"   # one max_seq_len block: a reservation
        running, queued = list(scheduler.running), list(scheduler.waiting)
        # Admitted in this step (with chunked prefill, a prompt's later chunks are not admissions).
        admitted = list(getattr(scheduled, "admitted", None) if hasattr(scheduled, "admitted")
                        else getattr(scheduled, "prefills", ()))
        for seq in admitted + running + queued:
            self._sequences.setdefault(seq.seq_id, seq)
        now_live = {s.seq_id for s in running} | {s.seq_id for s in queued}
        finished = tuple(s for s in self._sequences if s not in now_live and s not in self._done)
        self._done.update(finished)
        if not contiguous:
            pool, cache = manager.pool, manager.prefix_cache
            ref_counts = tuple(pool.ref_counts)
            cached = frozenset(b for b in range(pool.num_blocks) if cache is not None and b in cache)
            free_order = tuple(pool.free_ids())
            tables = tuple(TableEntry(seq_id, t.num_tokens, tuple(t.block_ids)) for seq_id, t in manager.tables.items())
            block_size = manager.block_size
        else:   # contiguous memory: no blocks; its reservations and their filled slots instead
            ref_counts, cached, free_order, tables, block_size = (), frozenset(), (), (), 0
        reservations: tuple[Reservation, ...] = ()
        if contiguous:
            size = manager.block_size
            reservations = tuple(sorted((Reservation(seq_id, t.block_ids[0] * size, size, t.num_tokens)
                                         for seq_id, t in manager.tables.items()), key=lambda r: r.start))
        steps = list(getattr(scheduled, "scheduled", ()))
        self.frames.append(Frame(
            step=len(self.frames),
            block_size=block_size,
            ref_counts=ref_counts,
            cached=cached,
            free_order=free_order,
            tables=tables,
            running=tuple(s.seq_id for s in running),
            waiting=tuple(s.seq_id for s in queued if not getattr(s, "num_preemptions", 0)),
            preempted=tuple(s.seq_id for s in queued if getattr(s, "num_preemptions", 0)),
            admitted=tuple(s.seq_id for s in admitted),
            preempted_now=tuple(s.seq_id for s in getattr(scheduled, "preempted", ())),
            finished=finished,
            copies=tuple((int(a), int(b)) for a, b in copies),
            num_output=tuple((seq_id, len(seq.output_token_ids)) for seq_id, seq in self._sequences.items()),
            prefill_tokens=sum(s.num_new_tokens for s in steps if s.is_prefill),
            decode_tokens=sum(s.num_new_tokens for s in steps if not s.is_prefill),
            token_budget=getattr(scheduler, "max_num_batched_tokens", None),
            reservations=reservations,
            capacity=manager.pool.capacity_tokens if contiguous else 0,
        ))

    # --- reading ------------------------------------------------------------------------
    def prompt_ids(self, seq_id: Hashable) -> list[int]:
        return list(self._sequence(seq_id).prompt_token_ids)

    def output_ids(self, seq_id: Hashable, frame: int | None = None) -> list[int]:
        """The tokens ``seq_id`` had generated after ``frame`` (after the last frame by default)."""
        seq = self._sequence(seq_id)
        n = len(seq.output_token_ids) if frame is None else self.frames[frame].outputs(seq_id)
        return list(seq.output_token_ids[:n])

    def prompt_text(self, seq_id: Hashable) -> str:
        return self._decode(seq_id, -1, self.prompt_ids(seq_id))

    def text(self, seq_id: Hashable, frame: int | None = None) -> str:
        """The reply so far: decoded with the engine's tokenizer, else the token ids."""
        ids = self.output_ids(seq_id, frame)
        return self._decode(seq_id, len(ids), ids)

    def _sequence(self, seq_id: Hashable) -> _Traced:
        if seq_id not in self._sequences:
            raise KeyError(f"no sequence {seq_id!r} in this trace; seen: {self.seq_ids[:10]}")
        return self._sequences[seq_id]

    def _decode(self, seq_id: Hashable, key: int, ids: list[int]) -> str:
        if self.tokenizer is None:
            return " ".join(map(str, ids))
        if (seq_id, key) not in self._decoded:
            self._decoded[(seq_id, key)] = self.tokenizer.decode(ids, skip_special_tokens=True)
        return self._decoded[(seq_id, key)]


__all__ = ["EngineTrace", "Frame", "Reservation", "TableEntry"]
