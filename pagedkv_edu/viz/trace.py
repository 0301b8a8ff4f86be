"""A live engine's run, one :class:`~.snapshot.Snapshot` per step, for chapter 6's replay.

``LLMEngine(..., trace=EngineTrace())`` records the block pool, the tables, the queues, the
step's token budget and events after every step (off by default: it copies the pool's reference
counts per step). Text is decoded on demand, so recording stays cheap. Data, not a view:
``viz.replay`` draws it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..checks import check_whole
from .snapshot import Snapshot, snapshot


class _Traced(Protocol):
    """A sequence as the trace reads it (the engine's ``Request``)."""

    seq_id: Hashable
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    num_preemptions: int


@dataclass
class EngineTrace:
    """The frames of one run, plus what is needed to show each sequence's text.

    ``max_frames`` bounds memory on a long run: recording stops (and ``truncated`` turns
    true) rather than silently dropping frames from the middle.
    """

    max_frames: int = 100_000
    frames: list[Snapshot] = field(default_factory=list)
    truncated: bool = False
    tokenizer: Any = None
    _sequences: dict[Hashable, _Traced] = field(default_factory=dict, repr=False)
    _decoded: dict[tuple[Hashable, int], str] = field(default_factory=dict, repr=False)
    _done: set[Hashable] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        check_whole("max_frames", self.max_frames, 1)

    def __len__(self) -> int:
        return len(self.frames)

    def __iter__(self) -> Iterator[Snapshot]:
        return iter(self.frames)

    def __getitem__(self, index: int) -> Snapshot:
        return self.frames[index]

    @property
    def seq_ids(self) -> list[Hashable]:
        """Every sequence the run saw, in the order it first appeared."""
        return list(self._sequences)

    # --- recording ----------------------------------------------------------------------
    def record(self, engine: Any, scheduled: Any) -> None:
        """Append the frame of the step that just ran: the engine's one call per step.

        ``scheduled`` is the step's ``ScheduledStep`` (its copy-on-write pairs included). Reads the
        engine; changes nothing in it.
        """
        if len(self.frames) >= self.max_frames:
            self.truncated = True
            return
        if self.tokenizer is None:
            self.tokenizer = getattr(engine, "tokenizer", None)
        scheduler = engine.scheduler
        running, queued = list(scheduler.running), list(scheduler.waiting)
        admitted = list(scheduled.admitted)   # not prefills: a prompt's later chunks are not admissions
        for seq in admitted + running + queued:
            self._sequences.setdefault(seq.seq_id, seq)
        now_live = {s.seq_id for s in running} | {s.seq_id for s in queued}
        finished = tuple(s for s in self._sequences if s not in now_live and s not in self._done)
        self._done.update(finished)
        self.frames.append(snapshot(
            scheduler.memory,   # a BlockManager; the contiguous engine's blocks are its max_seq_len reservations
            step=len(self.frames),
            running=tuple(s.seq_id for s in running),
            waiting=tuple(s.seq_id for s in queued if not s.num_preemptions),
            preempted=tuple(s.seq_id for s in queued if s.num_preemptions),
            admitted=tuple(s.seq_id for s in admitted),
            preempted_now=tuple(s.seq_id for s in scheduled.preempted),
            finished=finished,
            copies=tuple((int(a), int(b)) for a, b in scheduled.copies.copy),
            num_output=tuple((seq_id, len(seq.output_token_ids)) for seq_id, seq in self._sequences.items()),
            prefill_tokens=sum(s.num_new_tokens for s in scheduled.scheduled if s.is_prefill),
            decode_tokens=sum(s.num_new_tokens for s in scheduled.scheduled if not s.is_prefill),
            token_budget=scheduler.max_num_batched_tokens,
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


__all__ = ["EngineTrace"]
