"""The block-table explorer's state: the engine, stepped by a reader's clicks (chapters 2 and 7).

The model half of the explorer widget, with no widget in it. The reader takes the model's
place, as beam search does: a click adds a request (the engine admits and prefills it), gives
every running sequence one token and runs the engine's ``forward_step`` (a decode step), forks
or finishes a sequence. A click never raises on a reader's input: a refused one changes
nothing and says why in ``message``; a decode step that needs more free blocks than there are is
refused, not preempted (preemption is chapter 6). The block manager can be the reader's own
(chapter 2's exercise): it then runs checked, as in the engine.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from ..core.block_manager import BlockManager
from ..core.block_pool import BlockPool
from ..checks import check_whole, is_whole
from ..engine.engine import LLMEngine
from ..engine.guards import CheckedMemory
from ..core.request import Request, SamplingParams
from ..core.scheduler import Scheduler
from ..engine.runner import StandInRunner
from .language import Message, tr
from .render import request_label
from .snapshot import Snapshot, snapshot

_PARAMS = SamplingParams(max_tokens=1, ignore_eos=True)   # the reader decides when a request finishes: clicks, not
# the engine's sampling, add its tokens, so the admission check counts the prompt alone

ManagerFactory = Callable[[BlockPool, int | None], Any]
"""Builds the block manager over the explorer's pool, called as ``BlockManager.over(pool, max_seq_len)`` is; a
reader's class (built on ``ManagerBase``, whose constructor takes ``(pool, max_seq_len)``) is one as it is."""


class ExplorerState:
    """An engine over a block manager, plus the explorer's bookkeeping: request ids, a step count, a log."""

    def __init__(
        self,
        num_blocks: int = 16,
        block_size: int = 4,
        *,
        free_order: Sequence[int] | None = None,
        max_seq_len: int | None = None,
        log_size: int = 50,
        block_manager: ManagerFactory = BlockManager.over,
    ) -> None:
        """``free_order`` starts from a pool whose free queue is in that order (the articles'
        walk-throughs hand out blocks 7, 1, 3, ...); blocks not in it are held elsewhere.

        ``block_manager(pool, max_seq_len)`` builds the manager: the package's by default, or a
        reader's class (chapter 2), which then runs checked (:class:`CheckedMemory`). The explorer
        builds the pool, so one factory serves the first pool, ``free_order``'s, and every rebuilt one.
        """
        check_whole("log_size", log_size, 1)
        self.log_size = log_size
        self.max_seq_len = max_seq_len
        self.block_manager = block_manager
        self.events: list[str] = []     # messages (tr): English values, shown in the reader's language
        self.message: str = ""
        self.is_error = False
        self._build(num_blocks, block_size, free_order)
        self._note(tr("new pool: {num_blocks} blocks of {block_size} slots", num_blocks=num_blocks,
                      block_size=block_size))

    # --- reading ---------------------------------------------------------------------
    @property
    def scheduler(self) -> Scheduler:
        return self.engine.scheduler

    @property
    def manager(self) -> Any:
        """The block manager: the package's, or a reader's wrapped in :class:`CheckedMemory` (it answers the same)."""
        return self.engine.memory

    @property
    def num_blocks(self) -> int:
        return self.manager.pool.num_blocks

    @property
    def block_size(self) -> int:
        return self.manager.block_size

    @property
    def live_requests(self) -> list[int]:
        """Ids of the requests that hold blocks, oldest first."""
        return list(self._requests)

    def snapshot(self) -> Snapshot:
        """The frozen picture the renderer draws (with the last message and the log)."""
        return snapshot(self.manager, message=self.message, is_error=self.is_error, events=tuple(self.events))

    # --- actions -----------------------------------------------------------------------
    def add_request(self, prompt_tokens: int) -> int | None:
        """Admit a request with ``prompt_tokens`` tokens; its id, or None if it did not fit."""
        if not is_whole(prompt_tokens) or prompt_tokens < 1:
            self._fail(tr("a prompt needs at least 1 token, got {value!r}", value=prompt_tokens))
            return None
        next_id = len(self.engine.requests)    # the engine numbers requests 0, 1, ...
        name = request_label(next_id)
        if self.max_seq_len is not None and prompt_tokens > self.max_seq_len:
            self._fail(tr("{name}: {tokens} tokens exceed max_seq_len={max_seq_len}; not added", name=name,
                          tokens=prompt_tokens, max_seq_len=self.max_seq_len))
            return None
        need = -(-prompt_tokens // self.block_size)
        watermark = self.manager.watermark_blocks if self.manager.sequences else 0
        if need + watermark > self.manager.pool.num_free:
            self._fail(tr("{name} needs {need} blocks for {tokens} tokens but only {free} are free; not added",
                          name=name, need=need, tokens=prompt_tokens, free=self.manager.pool.num_free))
            return None
        request_id = self.engine.add_request([0] * prompt_tokens, _PARAMS)
        request = self.engine.requests[request_id]
        step, _ = self.engine.forward_step()     # the running are all computed: only the prefill runs
        assert step.admitted == [request], step.admitted
        self._requests[request_id] = request
        self._note(tr("add {name}: {tokens} tokens in blocks {blocks}", name=name, tokens=prompt_tokens,
                      blocks=self.manager.block_ids(request)))
        return request_id

    def decode_step(self) -> bool:
        """Grow every live request by one token, or none of them."""
        if not self._requests:
            return self._fail(tr("nothing to decode: add a request first"))
        live = self.manager.sequences
        too_long = [s.seq_id for s in live if self.max_seq_len is not None and s.num_tokens + 1 > self.max_seq_len]
        if too_long:
            return self._fail(tr("decode step refused: {names} reached max_seq_len={max_seq_len}; finish it first. "
                                 "Nothing changed.", names=_names(too_long), max_seq_len=self.max_seq_len))
        need = _blocks_to_grow_all(self.manager)   # copy-on-write blocks included
        growing, total = [s.seq_id for s in live if need[s]], sum(need.values())
        free = self.manager.pool.num_free
        if total > free:
            return self._fail(_refused_growth(_names(growing), total, free))
        before = {s: self.manager.block_ids(s) for s in live}
        for request in self.scheduler.running:              # each sampled one token: its K/V needs a slot
            self.engine.append_token(request, 0)
        step, _ = self.engine.forward_step()                # grows them in order, copying on write
        assert not step.preempted, "the blocks were counted above"
        copied = dict((dst, src) for src, dst in step.copies.copy)
        taken = {s.seq_id: [b for i, b in enumerate(self.manager.block_ids(s)) if i >= len(old) or old[i] != b]
                 for s, old in before.items()}
        self._step += 1
        growth = [self._describe_growth(r, ids, copied) for r, ids in taken.items() if ids]
        if len(taken) > 1:
            line = tr("decode step {step}: {n} requests +1 token", step=self._step, n=len(taken))
        else:
            line = tr("decode step {step}: {n} request +1 token", step=self._step, n=len(taken))
        self._note(_joined([line, *growth], "; "))
        return True

    def fork(self, request_id: Hashable) -> Hashable | None:
        """A new sample of ``request_id`` sharing all its blocks (no block taken); its id (``r0.1``, ...), or None."""
        if request_id not in self._requests:
            self._fail(tr("cannot fork {request}: not a live request (live: {live})",
                          request=request_label(request_id), live=self._live()))
            return None
        held = {s.seq_id for s in self.manager.sequences}
        n = self._forks.get(request_id, 0) + 1
        while f"{request_label(request_id)}.{n}" in held:   # forked on the manager itself
            n += 1
        self._forks[request_id] = n
        child = f"{request_label(request_id)}.{n}"
        self._requests[child] = self.engine.fork_sequence(self._requests[request_id], seq_id=child)
        self._note(tr("fork {parent} → {child}: shares blocks {blocks}, no block taken",
                      parent=request_label(request_id), child=child, blocks=self.manager.block_ids(self._requests[child])))
        return child

    def step_n(self, n: int) -> int:
        """Up to ``n`` decode steps, stopping at the first refused one; returns how many ran."""
        if not is_whole(n) or n < 1:
            self._fail(tr("step ×N needs N >= 1, got {n!r}", n=n))
            return 0
        for done in range(n):
            if not self.decode_step():
                self.message = tr("ran {done} of {n} steps, then: {message}", done=done, n=n, message=self.message)
                return done
        return n

    def finish(self, request_id: Hashable) -> bool:
        """Drop ``request_id``'s reference to each of its blocks (last first); unshared ones go back to the pool."""
        if request_id not in self._requests:
            return self._fail(tr("cannot finish {request}: not a live request (live: {live})",
                                 request=request_label(request_id), live=self._live()))
        request = self._requests.pop(request_id)
        released = self.manager.block_ids(request)[::-1]    # the table returns them last first
        self.engine.finish_sequence(request)
        freed = [b for b in released if self.manager.pool.is_free(b)]
        kept = [b for b in released if b not in freed]
        name = request_label(request_id)
        if kept:
            self._note(tr("finish {name}: blocks {freed} back to the free queue; blocks {kept} still shared",
                          name=name, freed=freed, kept=kept))
        else:
            self._note(tr("finish {name}: blocks {freed} back to the free queue", name=name, freed=freed))
        return True

    def set_block_size(self, block_size: int) -> bool:
        """Rebuild an empty pool with ``block_size`` slots per block (same block count)."""
        if block_size == self.block_size:
            return True
        return self._rebuild(self.num_blocks, block_size,
                             tr("block size {old} → {new}", old=self.block_size, new=block_size))

    def set_pool_size(self, num_blocks: int) -> bool:
        """Rebuild an empty pool of ``num_blocks`` blocks (same block size)."""
        if num_blocks == self.num_blocks:
            return True
        return self._rebuild(num_blocks, self.block_size,
                             tr("pool size {old} → {new} blocks", old=self.num_blocks, new=num_blocks))

    # --- internals ---------------------------------------------------------------------
    def _build(self, num_blocks: int, block_size: int, free_order: Sequence[int] | None) -> None:
        pool = (BlockPool(num_blocks, block_size) if free_order is None
                else BlockPool.from_free_order(num_blocks, block_size, free_order))
        manager = self.block_manager(pool, self.max_seq_len)
        if not isinstance(manager, BlockManager):     # a reader's: every answer checked before the engine uses it
            manager = CheckedMemory(manager)
        # The explorer checks max_seq_len itself, with a message; the engine's own check never fires.
        self.engine = LLMEngine(StandInRunner(), memory=manager, max_seq_len=sys.maxsize)
        self._requests: dict[Hashable, Request] = {}
        self._step = 0
        self._forks: dict[Hashable, int] = {}

    def _rebuild(self, num_blocks: int, block_size: int, what: Message) -> bool:
        dropped = len(self.manager.sequences)
        try:
            self._build(num_blocks, block_size, None)
        except ValueError as exc:     # the pool's own check (``check_whole``), in English: a name and a value
            return self._fail(tr("{what} refused: {error}", what=what, error=str(exc)))
        sizes = dict(what=what, num_blocks=num_blocks, block_size=block_size)
        if dropped > 1:
            note = tr("{what}: the pool was rebuilt empty ({num_blocks} blocks of {block_size} slots); "
                      "{dropped} live requests dropped", dropped=dropped, **sizes)
        elif dropped:
            note = tr("{what}: the pool was rebuilt empty ({num_blocks} blocks of {block_size} slots); "
                      "{dropped} live request dropped", dropped=dropped, **sizes)
        else:
            note = tr("{what}: the pool was rebuilt empty ({num_blocks} blocks of {block_size} slots)", **sizes)
        self._note(note)
        return True

    @staticmethod
    def _describe_growth(request_id: Hashable, new_ids: list[int], copied: dict[int, int]) -> Message:
        name = request_label(request_id)
        if new_ids[0] in copied and len(new_ids) > 1:
            return tr("{name} copied shared block {source} to block {copy} and took block {block}", name=name,
                      source=copied[new_ids[0]], copy=new_ids[0], block=new_ids[1])
        if new_ids[0] in copied:
            return tr("{name} copied shared block {source} to block {copy}", name=name, source=copied[new_ids[0]],
                      copy=new_ids[0])
        return tr("{name} took block {block}", name=name, block=new_ids[0])

    def _note(self, text: Message) -> None:
        self.message, self.is_error = text, False
        self._log(text)

    def _fail(self, text: Message) -> bool:
        """Record a refused action; returns False, what a refused action returns."""
        self.message, self.is_error = text, True
        self._log(tr("✗ {text}", text=text))
        return False

    def _live(self) -> Message | str:
        """The live requests' names, for a click on one that holds no blocks: ``r0, r1``, or "none"."""
        return _names(self.live_requests) if self.live_requests else tr("none")

    def _log(self, text: Message) -> None:
        self.events.append(text)
        del self.events[: -self.log_size]


def _joined(parts: Sequence[Message | str], sep: str) -> Message | str:
    """``parts`` joined by ``sep`` (``", "`` or ``"; "``), as one message: each part, and the separator, in the
    reader's language when shown (``str.join`` would fix the English values)."""
    first, *rest = parts
    for part in rest:
        first = tr("{first}, {rest}", first=first, rest=part) if sep == ", " else \
            tr("{first}; {rest}", first=first, rest=part)
    return first


def _names(request_ids: Sequence[Hashable]) -> Message | str:
    """Requests by their labels, ``r0, r1``: a list, joined as the reader's language lists things."""
    return _joined([request_label(r) for r in request_ids], ", ")


def _refused_growth(names: Message | str, total: int, free: int) -> Message:
    """A decode step that needs ``total`` new blocks, with ``free`` free (``total > free``)."""
    if total == 1:
        return tr("decode step refused: {names} needs a new block but only {free} are free. Nothing changed: "
                  "finish a request or enlarge the pool.", names=names, free=free)
    if free == 1:
        return tr("decode step refused: {names} each need a new block ({total} in all) but only {free} is free. "
                  "Nothing changed: finish a request or enlarge the pool.", names=names, total=total, free=free)
    return tr("decode step refused: {names} each need a new block ({total} in all) but only {free} are free. "
              "Nothing changed: finish a request or enlarge the pool.", names=names, total=total, free=free)


def _blocks_to_grow_all(manager: Any) -> dict[Any, int]:
    """New blocks each held sequence takes when every one grows by one token, in table order.

    A shared, partly filled last block is copied by its holders in turn: each copy drops a
    reference, so the last holder finds it private and writes in place.
    """
    refs: dict[int, int] = {}
    need: dict[Any, int] = {}
    for seq in manager.sequences:
        if seq.num_computed_tokens % manager.block_size == 0:
            need[seq] = 1
            continue
        last = manager.block_ids(seq)[-1]
        refs.setdefault(last, manager.pool.ref_counts[last])
        need[seq] = int(refs[last] > 1)
        refs[last] -= need[seq]
    return need
