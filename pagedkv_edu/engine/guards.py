"""The engine's checks on a part it did not ship: what a reader's block manager hands back is checked, every call.

A part that passed its grader can still misbehave on a case the grader never drew. Inside the engine it
must never give silently wrong tokens or corrupt the shipped parts' state, so :class:`CheckedMemory`
wraps a reader's memory and stops at the first call whose answer breaks the contract, with a message
naming the part, the call and the bad value: the ids a grant returns are the table's new ones and the
blocks are held, the table covers exactly the tokens, a refusal changed nothing, a release leaves the
sequence holding nothing. (The scheduler checks a reader's policy's plan itself.)

The messages are English templates with ``{fields}``, written through ``self.tr``: the layer that wraps a
reader's part passes its translator (the book's :func:`~pagedkv_edu.viz.language.tr`, which sits above the
engine), so the message reads in the reader's language; alone, the engine formats the English.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.block_table import blocks_needed
from ..core.prefix_cache import NO_HIT, PrefixHit


class PartError(RuntimeError):
    """A reader's part broke its contract inside the engine; the message names the part, the call and the value."""


def english(template: str, /, **fields: Any) -> str:
    """The engine's own translator: the English template, filled in."""
    return template.format(**fields)


class CheckedMemory:
    """``memory`` (a reader's block manager), with every answer checked before the engine uses it."""

    def __init__(self, memory: Any, part: str = "your block manager",   # en: not shown to readers (my_engine names it)
                 tr: Callable[..., str] = english) -> None:
        self.memory = memory
        self.part = part
        self.tr = tr

    def __getattr__(self, name: str) -> Any:     # questions and reading go straight through
        return getattr(self.memory, name)

    def __contains__(self, seq: Any) -> bool:
        return seq in self.memory

    def admit(self, seq: Any, num_new_tokens: int, hit: PrefixHit = NO_HIT) -> list[int] | None:
        before = self._state(seq)
        call = f"admit({seq.seq_id!r}, {num_new_tokens})"
        ids = self._call(call, self.memory.admit, seq, num_new_tokens, hit)
        if ids is None:
            return self._refused(call, seq, before)
        start = max(hit.num_tokens, seq.num_computed_tokens)
        table = self._granted(call, seq, start + num_new_tokens)
        if list(ids) != table:
            self._fail(call, self.tr("returned {ids}, but the sequence's table is {table}: return the whole table",
                                     ids=list(ids), table=table))
        if list(table[:len(hit.block_ids)]) != list(hit.block_ids):
            self._fail(call, self.tr("the table {table} does not start with the cached prefix's blocks {prefix}",
                                     table=table, prefix=list(hit.block_ids)))
        return ids

    def grow(self, seq: Any, num_new_tokens: int) -> list[int] | None:
        before = self._state(seq)
        old = self.memory.block_ids(seq)
        call = f"grow({seq.seq_id!r}, {num_new_tokens})"
        new = self._call(call, self.memory.grow, seq, num_new_tokens)
        if new is None:
            return self._refused(call, seq, before)
        table = self._granted(call, seq, seq.num_computed_tokens + num_new_tokens)
        kept = len(table) - len(new)
        if list(new) != table[kept:] or table[:kept] != old[:kept] or kept < len(old) - 1:
            self._fail(call, self.tr("returned {new}, but the table went from {old} to {table}: return the ids it "
                                     "gained (a copy-on-write's replacement first)", new=list(new), old=old,
                                     table=table))
        return new

    def release(self, seq: Any) -> list[int]:
        old = self.memory.block_ids(seq) if seq in self.memory else []
        free = self.memory.pool.num_free
        call = f"release({seq.seq_id!r})"
        released = self._call(call, self.memory.release, seq)
        if seq in self.memory:
            self._fail(call, self.tr("the sequence still holds blocks after its release"))
        if sorted(released) != sorted(old):
            self._fail(call, self.tr("returned {released}, but the sequence held {old}", released=released, old=old))
        if self.memory.pool.num_free < free:
            self._fail(call, self.tr("the pool had {free} free blocks and has {now} after a release", free=free,
                                     now=self.memory.pool.num_free))
        return released

    def fork(self, parent: Any, child: Any) -> None:
        call = f"fork({parent.seq_id!r}, {child.seq_id!r})"
        self._call(call, self.memory.fork, parent, child)
        if self.memory.block_ids(child) != self.memory.block_ids(parent):
            self._fail(call, self.tr("the child's table {child} is not its parent's {parent}",
                                     child=self.memory.block_ids(child), parent=self.memory.block_ids(parent)))

    # --- the checks ------------------------------------------------------------------------
    def _call(self, call: str, method: Any, *args: Any) -> Any:
        """Run the part's method; whatever it raises stops the engine as the part's failure, named."""
        try:
            return method(*args)
        except Exception as exc:   # noqa: BLE001 (a reader's code can raise anything: name it, keep the cause)
            raise PartError(self.tr("{part}: {call} raised {kind}: {error}", part=self.part, call=call,
                                    kind=type(exc).__name__, error=str(exc))) from exc

    def _state(self, seq: Any) -> tuple[int, list[int] | None, int]:
        pool = self.memory.pool
        return pool.num_free, self.memory.block_ids(seq) if seq in self.memory else None, sum(pool.ref_counts)

    def _refused(self, call: str, seq: Any, before: tuple[int, list[int] | None, int]) -> None:
        after = self._state(seq)
        if after != before:
            self._fail(call, self.tr("refused (None) but changed the memory: free blocks {free_before} -> "
                                     "{free_after}, table {table_before} -> {table_after}, references {refs_before} "
                                     "-> {refs_after}", free_before=before[0], free_after=after[0],
                                     table_before=before[1], table_after=after[1], refs_before=before[2],
                                     refs_after=after[2]))
        return None

    def _granted(self, call: str, seq: Any, num_tokens: int) -> list[int]:
        """The table after a grant, checked to cover ``num_tokens`` with held, distinct blocks."""
        if seq not in self.memory:
            self._fail(call, self.tr("granted, but the sequence holds no table"))
        table = self.memory.block_ids(seq)
        size, pool = self.memory.block_size, self.memory.pool
        if len(table) != blocks_needed(num_tokens, size):
            self._fail(call, self.tr("the table {table} has {count} blocks for {tokens} tokens; blocks of {size} "
                                     "need {needed}", table=table, count=len(table), tokens=num_tokens, size=size,
                                     needed=blocks_needed(num_tokens, size)))
        bad = [b for b in table if not (isinstance(b, int) and 0 <= b < pool.num_blocks and pool.ref_counts[b] > 0)]
        if bad or len(set(table)) != len(table):
            self._fail(call, self.tr("the table {table} names blocks it does not hold: {bad}", table=table, bad=bad)
                       if bad else self.tr("the table {table} names blocks it does not hold (a block twice)",
                                           table=table))
        return table

    def _fail(self, call: str, why: str) -> None:
        raise PartError(self.tr("{part}: {call}: {why}", part=self.part, call=call, why=why))


__all__ = ["CheckedMemory", "PartError"]
