"""The seams: what each part must answer for another (a reader's) to take its place in the engine.

The package's own implementation is one instance of each: :class:`KVMemory` is
:class:`~pagedkv_edu.core.block_manager.BlockManager` (and the simulator's contiguous arena),
:class:`SchedulePolicy` is :func:`~pagedkv_edu.core.scheduler.schedule`, :class:`PrefixCacheLike` is
:class:`~pagedkv_edu.core.prefix_cache.PrefixCache`, :class:`AttentionFn` is
:func:`~pagedkv_edu.attention.paged_attention`'s call shape, and :class:`RouterPolicy` is
:data:`~pagedkv_edu.sim.routing.Policy`. Protocols only: nothing here runs, and nothing imports torch.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Protocol

from .block_manager import BlockCopies, MemoryUsage
from .prefix_cache import BlockHash, BlockHasher, PrefixHit
from .request import Status
from .scheduler import SchedulerState


class SequenceRecord(Protocol):
    """A sequence as the core reads it (the engine's :class:`~pagedkv_edu.core.request.Request`)."""

    seq_id: Hashable
    status: Status
    num_computed_tokens: int      # the only token count: read by the memory, advanced by the scheduler
    prompt_end: int
    num_seqs: int
    prompt_token_ids: list[int] | None

    @property
    def num_tokens(self) -> int: ...
    @property
    def max_num_tokens(self) -> int: ...
    @property
    def token_ids(self) -> list[int] | None: ...
    def tokens(self, start: int, end: int) -> list[int]: ...
    def block_hashes(self, hasher: BlockHasher, num_blocks: int | None = None) -> Sequence[BlockHash]: ...


class KVMemory(Protocol):
    """What the scheduler asks of the KV memory. Each decision refuses (None) without changing anything."""

    block_size: int

    def fits(self, num_tokens: int) -> bool:
        """Could a sequence of this many tokens ever be held?"""

    def lookup(self, seq: SequenceRecord) -> PrefixHit:
        """Its cached prefix, without taking a reference."""

    def admit(self, seq: SequenceRecord, num_new_tokens: int, hit: PrefixHit = ...) -> list[int] | None:
        """Its whole table, its first blocks taken (the hit's, then new ones), or None."""

    def grow(self, seq: SequenceRecord, num_new_tokens: int) -> list[int] | None:
        """The block ids its table gained (a copy-on-write's replacement first), or None."""

    def release(self, seq: SequenceRecord) -> list[int]:
        """Every block back, last first."""

    def fork(self, parent: SequenceRecord, child: SequenceRecord) -> None: ...
    def swap_out(self, seq: SequenceRecord) -> bool:
        """Its blocks to host memory, or False (no room, no swap space) without change."""

    def take_copies(self) -> BlockCopies: ...
    def block_ids(self, seq: SequenceRecord) -> list[int]: ...
    def usage(self) -> MemoryUsage: ...


class SchedulePolicy(Protocol):
    """One step's decisions: ``{sequence: tokens}`` in batch order, granted through ``state.memory``."""

    def __call__(self, state: SchedulerState) -> dict[Any, int]: ...


class PrefixCacheLike(Protocol):
    """A prefix cache over one pool; built as ``cache(pool)``, it hooks the pool's ``on_reuse`` and ``is_cached``."""

    hasher: BlockHasher

    def lookup(self, token_ids: Sequence[int], hashes: Sequence[BlockHash]) -> PrefixHit: ...
    def insert(self, block_id: int, block_hash: BlockHash, parent_hash: BlockHash, token_ids: Sequence[int]) -> bool: ...
    def record(self, queried: int, hit: int) -> None: ...
    def __contains__(self, block_id: int) -> bool: ...


class AttentionFn(Protocol):
    """``fn(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale) -> out`` over a paged cache."""

    def __call__(self, q: Any, k_cache: Any, v_cache: Any, block_tables: Any, seq_lens: Any, query_start_loc: Any,
                 scale: float) -> Any: ...


class RouterPolicy(Protocol):
    """The request and the fleet in, a replica's index out."""

    def __call__(self, request: Any, fleet: Any) -> int: ...


__all__ = ["AttentionFn", "KVMemory", "PrefixCacheLike", "RouterPolicy", "SchedulePolicy", "SequenceRecord"]
