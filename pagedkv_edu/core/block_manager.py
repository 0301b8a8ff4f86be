"""The block manager: a pool plus one block table per live sequence; the scheduler's KV memory (chapters 2, 6-9).

One verb set for a sequence's life: :meth:`~BlockManager.admit` (its first tokens),
:meth:`~BlockManager.grow` (more tokens), :meth:`~BlockManager.release` (every block back),
plus :meth:`~BlockManager.fork` (a child sharing every block; copy-on-write later, chapter 7),
prefix caching (chapter 8) and swapping to host memory (chapter 9). It answers the scheduler's
questions (``can_admit``, ``can_grow``) with a watermark of free blocks kept for growth. It
keeps tables only: a sequence's hashes and counts live on its record. Every call validates
its input before touching state.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from itertools import chain
from dataclasses import dataclass
from typing import Any

from .block_pool import BlockPool, OutOfBlocksError
from .block_table import BlockTable, blocks_needed
from ..checks import check_token_ids, check_whole, is_whole
from .prefix_cache import BlockHash, HashFn, PrefixCache, PrefixHit, hash_block
from .swap import SwapSpace
from ..specs import utilisation


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


class BlockManager:
    """Owns a :class:`BlockPool` and the :class:`BlockTable` of every live sequence.

    ``watermark_blocks`` stay free at admission while anything runs (room for the running
    sequences to grow); ``swap`` (a :class:`~pagedkv_edu.core.swap.SwapSpace`) lets the scheduler
    preempt by swapping.
    """

    def __init__(self, num_blocks: int, block_size: int, max_seq_len: int | None = None, *,
                 enable_prefix_caching: bool = False, watermark_blocks: int = 0,
                 swap: SwapSpace | None = None) -> None:
        if max_seq_len is not None:
            check_whole("max_seq_len", max_seq_len, 1)
        check_whole("watermark_blocks", watermark_blocks)
        if swap is not None and swap.block_size != block_size:
            raise ValueError(f"the swap space's blocks hold {swap.block_size} tokens, the pool's {block_size}")
        self.pool = BlockPool(num_blocks, block_size)
        self.max_seq_len = max_seq_len
        self.watermark_blocks = watermark_blocks
        self.swap = swap
        self.tables: dict[Hashable, BlockTable] = {}
        self.prefix_cache: PrefixCache | None = None
        self._copies: list[tuple[int, int]] = []            # copy-on-write pairs not yet taken
        if enable_prefix_caching:
            self.enable_prefix_caching()

    @classmethod
    def over(cls, pool: BlockPool, max_seq_len: int | None = None) -> "BlockManager":
        """A manager over an existing pool (e.g. one built by ``BlockPool.from_free_order``)."""
        if not isinstance(pool, BlockPool):
            raise ValueError(f"BlockManager.over needs a BlockPool, got {pool!r}")
        manager = cls(1, pool.block_size, max_seq_len)
        manager.pool = pool
        return manager

    def enable_prefix_caching(self, hash_fn: HashFn = hash_block) -> PrefixCache:
        """Turn on automatic prefix caching over this manager's pool (before any sequence is admitted)."""
        if self.tables:
            raise ValueError(f"turn prefix caching on before admitting sequences; {len(self.tables)} are live")
        if self.prefix_cache is not None:
            raise ValueError("prefix caching is already on")
        self.prefix_cache = PrefixCache(self.pool, hash_fn)
        return self.prefix_cache

    @property
    def block_size(self) -> int:
        return self.pool.block_size

    # --- questions the scheduler asks -------------------------------------------------
    def fits_ever(self, num_tokens: int) -> bool:
        """Could a sequence of ``num_tokens`` fit if it had the pool to itself?"""
        return blocks_needed(num_tokens, self.block_size) <= self.pool.num_blocks

    def block_hashes(self, seq: Any) -> Sequence[BlockHash] | None:
        """A sequence's full-block hash chain when the prefix cache needs it (its record's, hashed once), else None."""
        if self.prefix_cache is None:
            return None
        tokens = getattr(seq, "token_ids", None)   # a property that joins prompt and output: asked only when needed
        if tokens is None:
            return None
        if hasattr(seq, "hashes"):
            return seq.hashes(self.block_size, self.prefix_cache.hash_fn)
        return self.prefix_cache.chain(tokens)

    def cached_prefix(self, token_ids: Sequence[int] | None, hashes: Sequence[BlockHash] | None = None) -> int:
        """Tokens of a new sequence the prefix cache holds already (0 without caching or ids)."""
        cache = self.prefix_cache
        return 0 if cache is None or token_ids is None else cache.lookup(token_ids, hashes).num_tokens

    def can_admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None,
                  hashes: Sequence[BlockHash] | None = None) -> bool:
        """Would a new sequence of ``num_tokens`` fit, leaving the watermark free (if anything runs)?

        With prefix caching and ``token_ids``, only the blocks it really takes count; ``hashes``,
        the ids' chain computed before, spares hashing them again.
        """
        watermark = self.watermark_blocks if self.tables else 0
        return self.blocks_to_admit(num_tokens, token_ids, hashes) + watermark <= self.pool.num_free

    def blocks_to_admit(self, num_tokens: int, token_ids: Sequence[int] | None = None,
                        hashes: Sequence[BlockHash] | None = None) -> int:
        """Free blocks that admitting this sequence would take: new ones, plus cached free ones it revives."""
        check_whole("num_tokens", num_tokens)
        return self._blocks_for(num_tokens, self._lookup(num_tokens, token_ids, hashes))

    def _blocks_for(self, num_tokens: int, hit: PrefixHit) -> int:
        taken_from_free = sum(1 for b in hit.block_ids if self.pool.ref_counts[b] == 0)
        return blocks_needed(num_tokens, self.block_size) - len(hit.block_ids) + taken_from_free

    def can_grow(self, seq_id: Hashable, n: int = 1) -> bool:
        """Would ``n`` more tokens for ``seq_id`` fit in the pool right now (a copy-on-write included)?"""
        return self.blocks_to_grow(seq_id, n) <= self.pool.num_free

    def blocks_to_grow(self, seq_id: Hashable, n: int = 1) -> int:
        """New blocks that growing ``seq_id`` by ``n`` tokens takes: the table's, plus one for a copy-on-write."""
        table = self._table(seq_id)
        return table.blocks_to_append(n) + self._must_copy(table, n)

    def blocks_to_grow_all(self) -> dict[Hashable, int]:
        """New blocks each live sequence takes when every one grows by one token, in table order.

        A shared, partly filled last block is copied by its holders in turn: each copy drops a
        reference, so the last holder finds it private and writes in place.
        """
        refs: dict[int, int] = {}
        need: dict[Hashable, int] = {}
        for seq_id, table in self.tables.items():
            if table.num_tokens % self.block_size == 0:
                need[seq_id] = 1
                continue
            last = table.block_ids[-1]
            refs.setdefault(last, self.pool.ref_counts[last])
            need[seq_id] = int(refs[last] > 1)
            refs[last] -= need[seq_id]
        return need

    # --- a sequence's life ---------------------------------------------------------------
    def admit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None,
              hashes: Sequence[BlockHash] | None = None) -> int:
        """Take blocks for a new sequence's first ``num_tokens``; returns the tokens found in the prefix cache.

        With prefix caching and its ``token_ids``, the table starts with the longest cached
        prefix (each block gains a reference) and its own full blocks become findable at once,
        so a sequence admitted later in the same step shares them (the forward pass writes a
        layer's K/V for the whole batch before any of it attends).
        """
        if seq_id in self.tables:
            raise KeyError(f"sequence {seq_id!r} is already live")
        self._check_length(seq_id, num_tokens)
        if token_ids is not None and hashes is None:
            token_ids = check_token_ids(token_ids)
        hit = self._lookup(num_tokens, token_ids, hashes)
        chain = None                            # every full block's hash, computed before anything changes
        if self.prefix_cache is not None and token_ids is not None:
            chain = (list(hashes[:num_tokens // self.block_size]) if hashes is not None
                     else self.prefix_cache.chain(token_ids, hit.hashes))
        need = self._blocks_for(num_tokens, hit)
        if hit.block_ids and need > self.pool.num_free:   # (without a hit, the table says it itself)
            raise OutOfBlocksError(f"sequence {seq_id!r}: {num_tokens} tokens need {need} free blocks "
                                   f"({len(hit.block_ids)} found in the prefix cache); the pool has {self.pool.num_free}")
        for block_id in hit.block_ids:          # first, so allocating the rest cannot evict them
            self.pool.touch(block_id)
        table = BlockTable(self.block_size, list(hit.block_ids), hit.num_tokens)
        table.append_tokens(self.pool, num_tokens - hit.num_tokens)
        self.tables[seq_id] = table
        if chain is not None:
            self.prefix_cache.record(num_tokens, hit.num_tokens)
            self._register(table, token_ids, chain, len(hit.block_ids))
        return hit.num_tokens

    def grow(self, seq_id: Hashable, n: int = 1) -> list[int]:
        """Grow ``seq_id`` by ``n`` tokens; returns the new block ids (often none).

        If its last block is partly filled and shared, it first swaps it for a fresh block (the
        first id returned, at the table's old last index) and queues the copy: copy-on-write.
        """
        table = self._table(seq_id)
        check_whole("n (tokens to grow by)", n)
        self._check_length(seq_id, table.num_tokens + n)
        if not self._must_copy(table, n):
            return table.append_tokens(self.pool, n)
        need = table.blocks_to_append(n) + 1
        if need > self.pool.num_free:
            raise OutOfBlocksError(f"growing {seq_id!r} by {n} tokens needs {need} new blocks (one to copy its "
                                   f"shared last block); the pool has {self.pool.num_free} free")
        shared = table.block_ids[-1]
        (own,) = self.pool.allocate(1)
        self.pool.free(shared)               # one reference fewer; the other sequences keep it unchanged
        table.block_ids[-1] = own
        self._copies.append((shared, own))
        return [own] + table.append_tokens(self.pool, n)

    def fork(self, parent_id: Hashable, child_id: Hashable) -> BlockTable:
        """A child that shares every block of ``parent_id`` (each gains a reference); no block is copied yet."""
        parent = self._table(parent_id)
        if child_id in self.tables:
            raise KeyError(f"sequence {child_id!r} is already live")
        for block_id in parent.block_ids:
            self.pool.incref(block_id)
        self.tables[child_id] = BlockTable(self.block_size, list(parent.block_ids), parent.num_tokens)
        return self.tables[child_id]

    def release(self, seq_id: Hashable) -> list[int]:
        """Give back every block of ``seq_id`` (its host blocks, if swapped out); returns them in release order.

        Shared blocks lose one reference and stay with their other holders. A queued copy into a
        block that is now free is dropped: nobody will read it.
        """
        if seq_id not in self.tables and self.swap is not None and seq_id in self.swap.tables:
            self.swap.drop(seq_id)
            return []
        released = self._table(seq_id).release(self.pool)
        del self.tables[seq_id]
        self._copies = [(src, dst) for src, dst in self._copies if self.pool.ref_counts[dst] > 0]
        return released

    def take_copies(self) -> list[tuple[int, int]]:
        """The (source, destination) copy-on-write pairs queued since the last call, to apply before the forward pass."""
        copies, self._copies = self._copies, []
        return copies

    # --- the prefix cache: computed blocks become findable ------------------------------
    def scheduled(self, seq: Any, start: int = 0) -> None:
        """Tokens ``start`` .. of ``seq``'s table will be computed by this step: the blocks they fill become findable."""
        if self.prefix_cache is None:
            return
        table = self.tables.get(seq.seq_id)
        if table is not None and table.num_tokens // self.block_size <= start // self.block_size:
            return   # the step fills no block (most decode steps): nothing new to offer, no token ids to join
        tokens = getattr(seq, "token_ids", None)
        if tokens is not None:
            self.mark_computed(seq.seq_id, tokens, self.block_hashes(seq), start=start)

    def mark_computed(self, seq_id: Hashable, token_ids: Sequence[int], hashes: Sequence[BlockHash] | None = None,
                      *, start: int = 0) -> int:
        """The K/V of every token in ``seq_id``'s table are written: offer its full blocks from token ``start`` on.

        ``token_ids`` are at least the table's tokens; ``hashes`` their chain if computed before.
        Returns the blocks added to the cache (an equal block cached already stays private).
        """
        table = self._table(seq_id)
        if hashes is None:
            token_ids = check_token_ids(token_ids)
        if self.prefix_cache is None:
            return 0
        if len(token_ids) < table.num_tokens:
            raise ValueError(f"sequence {seq_id!r} holds {table.num_tokens} tokens but {len(token_ids)} token ids "
                             f"were given")
        full = table.num_tokens // self.block_size
        if hashes is None or len(hashes) < full:
            hashes = self.prefix_cache.chain(token_ids[:full * self.block_size], hashes or ())
        return self._register(table, token_ids, hashes, start // self.block_size)

    def _register(self, table: BlockTable, token_ids: Sequence[int], chain: Sequence[BlockHash], first: int) -> int:
        assert self.prefix_cache is not None  # callers check
        size, added = self.block_size, 0
        for i in range(first, table.num_tokens // size):
            parent = table.block_ids[i - 1] if i else None
            added += self.prefix_cache.insert(table.block_ids[i], chain[i], parent, token_ids[i * size:(i + 1) * size])
        return added

    # --- swapping (chapter 9) ------------------------------------------------------------
    def can_swap_out(self, seq_id: Hashable) -> bool:
        return self.swap is not None and self.swap.can_swap_out(self._table(seq_id).num_tokens)

    def swap_out(self, seq_id: Hashable) -> list[tuple[int, int]]:
        """Move the sequence's blocks to host blocks; returns the (device, host) copies, to make before any write."""
        assert self.swap is not None
        table = self._table(seq_id)
        pairs = self.swap.swap_out(seq_id, list(table.block_ids), table.num_tokens)
        self.release(seq_id)   # its device blocks; the host ones stay until swap_in
        return pairs

    def can_swap_in(self, seq_id: Hashable, num_tokens: int) -> bool:
        """Room for a swapped sequence grown to ``num_tokens``, and the watermark."""
        watermark = self.watermark_blocks if self.tables else 0
        return blocks_needed(num_tokens, self.block_size) + watermark <= self.pool.num_free

    def swap_in(self, seq_id: Hashable) -> list[tuple[int, int]]:
        """Fresh blocks for a swapped sequence; returns the (host, device) copies."""
        assert self.swap is not None
        self.admit(seq_id, self.swap.num_tokens(seq_id))
        return self.swap.swap_in(seq_id, self.tables[seq_id].block_ids)

    # --- reading ---------------------------------------------------------------------
    def table(self, seq_id: Hashable) -> BlockTable:
        return self._table(seq_id)

    def block_ids(self, seq_id: Hashable) -> list[int]:
        return self._table(seq_id).block_ids

    def slot_mapping(self, seq_id: Hashable, start: int = 0, end: int | None = None) -> list[int]:
        return self._table(seq_id).slot_mapping(start, end)

    def ref_count_of(self, seq_id: Hashable) -> list[int]:
        """Reference count of each block in ``seq_id``'s table (above 1: shared)."""
        return [self.pool.ref_counts[b] for b in self._table(seq_id).block_ids]

    @property
    def num_tokens(self) -> int:
        """Tokens stored across all live sequences (a shared block's tokens count for each sharer)."""
        return sum(t.num_tokens for t in self.tables.values())

    @property
    def num_stored_tokens(self) -> int:
        """Tokens held in the blocks in use, a shared block's counted once: what the memory holds.

        Every block is full but a last one, and sharers of a partly filled last block hold the same
        tokens in it (the first to append copies it), so: distinct blocks x block size, less the
        empty tail of each distinct last block. The simulator asks this every step.
        """
        size = self.block_size
        blocks = set(chain.from_iterable(t.block_ids for t in self.tables.values()))
        tails = {t.block_ids[-1]: size - t.num_tokens % size for t in self.tables.values() if t.num_tokens % size}
        return len(blocks) * size - sum(tails.values())

    @property
    def waste_slots(self) -> int:
        """Allocated but empty slots: the unfilled tails of last blocks."""
        return self.pool.num_used * self.block_size - self.num_stored_tokens

    def usage(self) -> MemoryUsage:
        return MemoryUsage(self.num_stored_tokens, self.pool.num_used * self.block_size, self.pool.capacity_tokens)

    def _lookup(self, num_tokens: int, token_ids: Sequence[int] | None,
                hashes: Sequence[BlockHash] | None = None) -> PrefixHit:
        """The cached prefix a new sequence would start from; ids are checked unless ``hashes`` come with them."""
        if token_ids is None:
            return PrefixHit((), (), 0)
        if hashes is None:
            token_ids = check_token_ids(token_ids)
        if len(token_ids) != num_tokens:
            raise ValueError(f"{len(token_ids)} token ids given for a sequence of {num_tokens} tokens")
        return PrefixHit((), (), 0) if self.prefix_cache is None else self.prefix_cache.lookup(token_ids, hashes)

    def _must_copy(self, table: BlockTable, n: int) -> bool:
        """Growing by ``n`` tokens writes into a last block that another sequence can see."""
        return (n > 0 and table.num_tokens % self.block_size != 0
                and self.pool.ref_counts[table.block_ids[-1]] > 1)

    def _table(self, seq_id: Hashable) -> BlockTable:
        try:
            return self.tables[seq_id]
        except KeyError:
            raise KeyError(f"unknown sequence {seq_id!r} (never admitted, or already released)") from None

    def _check_length(self, seq_id: Hashable, num_tokens: int) -> None:
        if not is_whole(num_tokens) or num_tokens < 0:
            raise ValueError(f"sequence {seq_id!r}: token count must be a non-negative integer, got {num_tokens!r}")
        if self.max_seq_len is not None and num_tokens > self.max_seq_len:
            raise ValueError(f"sequence {seq_id!r}: {num_tokens} tokens exceed max_seq_len={self.max_seq_len}")
        if num_tokens > self.pool.capacity_tokens:   # more blocks than the whole pool
            raise OutOfBlocksError(
                f"sequence {seq_id!r}: {num_tokens} tokens need {blocks_needed(num_tokens, self.block_size)} "
                f"blocks but the whole pool has {self.pool.num_blocks}"
            )
