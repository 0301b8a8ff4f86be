"""The block manager: a pool plus one block table per running sequence.

This is the memory half of a paged serving engine at nano-vllm's scale. It answers the
scheduler's questions ("can this prompt be admitted?", "can every running sequence grow by
one token?") and performs the three events of a sequence's life: add (prefill), append
(one decode step) and finish (return every block at once).

Every method validates its input before touching state, so a bad call leaves the pool and
every table exactly as they were.

Chapters 7 and 8 add sharing, in three pieces (fork and copy-on-write in 7, prefix caching in 8):

* **fork**: a child sequence points at all its parent's blocks, each gaining a reference
  (parallel sampling: n samples of one prompt hold the prompt once);
* **copy-on-write**: a sequence about to append into a *shared, partly filled* last block
  first gets its own copy of it, so the others never see its tokens. The manager only
  decides; the (source, destination) pairs wait in :meth:`take_copies` for the engine to
  copy the K/V tensors before the step's forward pass (vLLM v0's ``blocks_to_copy``).
  Full shared blocks are never written again, so they are never copied;
* **automatic prefix caching** (optional, :mod:`pagedkv_edu.prefix_cache`): a sequence added
  with its token ids starts from the longest cached prefix of full blocks. Its own full prompt
  blocks are registered in the cache at once, as vLLM v1 does, so a request admitted later in
  the *same* step shares them too: the forward pass writes a layer's K/V for the whole batch
  before any of it attends. Blocks that fill during decoding are registered when the engine
  reports them computed (:meth:`mark_computed`).

  Registering before computing is safe because the scheduler grows its running sequences
  before admitting new ones (vLLM v1's order): a sequence admitted in a step is never
  preempted in that same step, so its blocks are always written by the step's forward pass.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from .block_pool import BlockPool, OutOfBlocksError
from .block_table import BlockTable, blocks_needed
from .checks import check_token_ids, check_whole, is_whole
from .prefix_cache import BlockHash, HashFn, PrefixCache, PrefixHit, hash_block


class BlockManager:
    """Owns a :class:`BlockPool` and the :class:`BlockTable` of every live sequence."""

    def __init__(self, num_blocks: int, block_size: int, max_seq_len: int | None = None, *,
                 enable_prefix_caching: bool = False) -> None:
        if max_seq_len is not None:
            check_whole("max_seq_len", max_seq_len, 1)
        self.pool = BlockPool(num_blocks, block_size)
        self.max_seq_len = max_seq_len
        self.tables: dict[Hashable, BlockTable] = {}
        self.prefix_cache: PrefixCache | None = None
        self._copies: list[tuple[int, int]] = []            # copy-on-write pairs not yet taken
        self._hashes: dict[Hashable, list[BlockHash]] = {}   # each sequence's chain of full-block hashes
        self._cached_tokens: dict[Hashable, int] = {}        # prompt tokens found in the cache at admission
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
        """Turn on automatic prefix caching over this manager's pool (before any sequence is added)."""
        if self.tables:
            raise ValueError(f"turn prefix caching on before adding sequences; {len(self.tables)} are live")
        if self.prefix_cache is not None:
            raise ValueError("prefix caching is already on")
        self.prefix_cache = PrefixCache(self.pool, hash_fn)
        return self.prefix_cache

    @property
    def block_size(self) -> int:
        return self.pool.block_size

    # --- questions the scheduler asks -------------------------------------------------
    def can_allocate(self, num_tokens: int, watermark_blocks: int = 0,
                     token_ids: Sequence[int] | None = None, hashes: Sequence[BlockHash] | None = None) -> bool:
        """Would a new sequence of ``num_tokens`` fit, leaving ``watermark_blocks`` free?

        With prefix caching and ``token_ids``, only the blocks it really takes count: cached
        blocks in use cost nothing, cached free blocks come out of the free queue. ``hashes``,
        the ids' block hash chain computed before (at least up to ``num_tokens``), saves hashing them again.
        """
        check_whole("watermark_blocks", watermark_blocks)
        return self.blocks_to_admit(num_tokens, token_ids, hashes) + watermark_blocks <= self.pool.num_free

    def blocks_to_admit(self, num_tokens: int, token_ids: Sequence[int] | None = None,
                        hashes: Sequence[BlockHash] | None = None) -> int:
        """Free blocks that adding this sequence would take from the pool."""
        check_whole("num_tokens", num_tokens)
        return self._blocks_to_admit(num_tokens, self._lookup(num_tokens, token_ids, hashes))

    def can_append(self, seq_id: Hashable, n: int = 1) -> bool:
        """Would ``n`` more tokens for ``seq_id`` fit in the pool right now (a copy-on-write included)?"""
        return self.blocks_to_append(seq_id, n) <= self.pool.num_free

    def blocks_to_append(self, seq_id: Hashable, n: int = 1) -> int:
        """New blocks that appending ``n`` tokens to ``seq_id`` takes: the table's, plus one for a copy-on-write."""
        table = self._table(seq_id)
        return table.blocks_to_append(n) + self._must_copy(table, n)

    def blocks_to_grow_all(self) -> dict[Hashable, int]:
        """New blocks each live sequence takes when every one grows by one token, in table order.

        As :meth:`blocks_to_append`, except that a shared, partly filled last block is copied
        by its holders in turn: each copy drops a reference, so the last live holder finds
        the block private and writes in place (unless something else, such as the prefix
        cache, still holds it).
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
    def add_sequence(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] | None = None,
                     hashes: Sequence[BlockHash] | None = None) -> BlockTable:
        """Admit a sequence with ``num_tokens`` prompt tokens and allocate its blocks.

        With prefix caching and its ``token_ids``, the table starts with the longest cached
        prefix (each of those blocks gains a reference) and only the rest is allocated;
        :meth:`num_cached_tokens` says how many tokens the engine need not compute. ``hashes``
        (the engine's record computes them once) spares hashing the ids here.
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
        need = self._blocks_to_admit(num_tokens, hit)
        if hit.block_ids and need > self.pool.num_free:   # (without a hit, the table says it itself)
            raise OutOfBlocksError(f"sequence {seq_id!r}: {num_tokens} tokens need {need} free blocks "
                                   f"({len(hit.block_ids)} found in the prefix cache); the pool has {self.pool.num_free}")
        for block_id in hit.block_ids:          # first, so allocating the rest cannot evict them
            self.pool.touch(block_id)
        table = BlockTable(self.block_size, list(hit.block_ids), hit.num_tokens)
        table.append_tokens(self.pool, num_tokens - hit.num_tokens)
        self.tables[seq_id] = table
        self._cached_tokens[seq_id] = hit.num_tokens
        if chain is not None:
            self.prefix_cache.record(num_tokens, hit.num_tokens)
            self._hashes[seq_id] = list(hit.hashes)
            self._register_full_blocks(seq_id, token_ids, chain)
        return table

    def fork(self, parent_id: Hashable, child_id: Hashable) -> BlockTable:
        """A child that shares every block of ``parent_id`` (each gains a reference); no block is copied yet."""
        parent = self._table(parent_id)
        if child_id in self.tables:
            raise KeyError(f"sequence {child_id!r} is already live")
        for block_id in parent.block_ids:
            self.pool.incref(block_id)
        child = BlockTable(self.block_size, list(parent.block_ids), parent.num_tokens)
        self.tables[child_id] = child
        self._cached_tokens[child_id] = 0
        if parent_id in self._hashes:
            self._hashes[child_id] = list(self._hashes[parent_id])
        return child

    def append_tokens(self, seq_id: Hashable, n: int = 1) -> list[int]:
        """Grow ``seq_id`` by ``n`` tokens; returns newly allocated block ids (often none).

        If its last block is partly filled and shared, the sequence first swaps it for a
        fresh block (the first id returned) and queues the copy: copy-on-write.
        """
        table = self._table(seq_id)
        check_whole("n (tokens to append)", n)
        self._check_length(seq_id, table.num_tokens + n)
        if not self._must_copy(table, n):
            return table.append_tokens(self.pool, n)
        need = table.blocks_to_append(n) + 1
        if need > self.pool.num_free:
            raise OutOfBlocksError(f"appending {n} tokens to {seq_id!r} needs {need} new blocks (one to copy its "
                                   f"shared last block); the pool has {self.pool.num_free} free")
        shared = table.block_ids[-1]
        (own,) = self.pool.allocate(1)
        self.pool.free(shared)               # one reference fewer; the other sequences keep it unchanged
        table.block_ids[-1] = own
        self._copies.append((shared, own))
        return [own] + table.append_tokens(self.pool, n)

    def take_copies(self) -> list[tuple[int, int]]:
        """The (source, destination) block copies queued by copy-on-write since the last call.

        Apply them to the K/V tensors before the next forward pass, all sources read before
        any destination is written (:meth:`~pagedkv_edu.kv_cache.PagedKVCache.copy_blocks`).
        """
        copies, self._copies = self._copies, []
        return copies

    def mark_computed(self, seq_id: Hashable, token_ids: Sequence[int],
                      hashes: Sequence[BlockHash] | None = None) -> int:
        """The forward pass has written the K/V of every token in ``seq_id``'s table.

        The blocks that filled since its admission (decoding, or the next chunk of a chunked
        prefill) become findable. ``token_ids`` are the sequence's
        tokens, at least as many as the table holds; ``hashes``, their block hash chain if
        already computed. Returns the number of blocks added to the
        cache; without prefix caching it does nothing.
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
        if hashes is not None and len(hashes) >= full:
            chain = list(hashes[:full])
        else:
            chain = self.prefix_cache.chain(token_ids[:table.num_tokens], self._hashes.get(seq_id, []))
        return len(self._register_full_blocks(seq_id, token_ids, chain))

    def _register_full_blocks(self, seq_id: Hashable, token_ids: Sequence[int], chain: list[BlockHash]) -> list[int]:
        """Make ``seq_id``'s full blocks not registered yet findable (their hashes are ``chain``).

        Returns the blocks registered. A block whose hash is cached already (an equal block,
        or a collision) stays private, and so do the blocks after it.
        """
        assert self.prefix_cache is not None  # callers check
        table, size = self.tables[seq_id], self.block_size
        hashes = self._hashes.setdefault(seq_id, [])
        registered = []
        for i in range(len(hashes), table.num_tokens // size):
            hashes.append(chain[i])
            parent = table.block_ids[i - 1] if i else None
            if self.prefix_cache.insert(table.block_ids[i], chain[i], parent, token_ids[i * size:(i + 1) * size]):
                registered.append(table.block_ids[i])
        return registered

    def finish(self, seq_id: Hashable) -> list[int]:
        """Return every block of ``seq_id`` to the pool; returns them in release order.

        Shared blocks lose one reference and stay with their other holders. A queued copy
        into a block that is now free is dropped: nobody will read it.
        """
        table = self._table(seq_id)
        released = table.release(self.pool)
        del self.tables[seq_id]
        self._hashes.pop(seq_id, None)
        self._cached_tokens.pop(seq_id, None)
        self._copies = [(src, dst) for src, dst in self._copies if self.pool.ref_counts[dst] > 0]
        return released

    # --- reading ---------------------------------------------------------------------
    def table(self, seq_id: Hashable) -> BlockTable:
        return self._table(seq_id)

    def slot_mapping(self, seq_id: Hashable, start: int = 0, end: int | None = None) -> list[int]:
        return self._table(seq_id).slot_mapping(start, end)

    def num_hashed_blocks(self, seq_id: Hashable) -> int:
        """Full blocks of ``seq_id`` already offered to the prefix cache (0 without caching)."""
        return len(self._hashes.get(seq_id, ()))

    def num_cached_tokens(self, seq_id: Hashable) -> int:
        """Tokens of ``seq_id`` found in the prefix cache when it was added: the prefill skips them."""
        self._table(seq_id)
        return self._cached_tokens.get(seq_id, 0)

    def ref_count_of(self, seq_id: Hashable) -> list[int]:
        """Reference count of each block in ``seq_id``'s table (above 1: shared)."""
        return [self.pool.ref_counts[b] for b in self._table(seq_id).block_ids]

    @property
    def num_tokens(self) -> int:
        """Tokens stored across all live sequences (a shared block's tokens count for each sharer)."""
        return sum(t.num_tokens for t in self.tables.values())

    @property
    def num_stored_tokens(self) -> int:
        """Tokens held in the blocks in use, a shared block's counted once: what the memory holds."""
        fills: dict[int, int] = {}
        for table in self.tables.values():
            for block_id, fill in zip(table.block_ids, table.fills):
                fills[block_id] = max(fills.get(block_id, 0), fill)
        return sum(fills.values())

    @property
    def waste_slots(self) -> int:
        """Allocated but empty slots: the unfilled tails of last blocks."""
        return self.pool.num_used * self.block_size - self.num_stored_tokens

    def _lookup(self, num_tokens: int, token_ids: Sequence[int] | None,
                hashes: Sequence[BlockHash] | None = None) -> PrefixHit:
        """The cached prefix a new sequence would start from (none without caching or token ids).

        Every id is checked, those of a partly filled last block too, with caching on or off,
        unless ``hashes`` come with them (the engine checked its requests' ids once, at ``add_request``).
        """
        if token_ids is None:
            return PrefixHit((), (), 0)
        if hashes is None:
            token_ids = check_token_ids(token_ids)
        if len(token_ids) != num_tokens:
            raise ValueError(f"{len(token_ids)} token ids given for a sequence of {num_tokens} tokens")
        return PrefixHit((), (), 0) if self.prefix_cache is None else self.prefix_cache.lookup(token_ids, hashes)

    def _blocks_to_admit(self, num_tokens: int, hit: PrefixHit) -> int:
        """New blocks for the uncached rest, plus the cached blocks that must leave the free queue."""
        taken_from_free = sum(1 for b in hit.block_ids if self.pool.ref_counts[b] == 0)
        return blocks_needed(num_tokens, self.block_size) - len(hit.block_ids) + taken_from_free

    def _must_copy(self, table: BlockTable, n: int) -> bool:
        """Appending ``n`` tokens writes into a last block that another sequence can see."""
        return (n > 0 and table.num_tokens % self.block_size != 0
                and self.pool.ref_counts[table.block_ids[-1]] > 1)

    def _table(self, seq_id: Hashable) -> BlockTable:
        try:
            return self.tables[seq_id]
        except KeyError:
            raise KeyError(f"unknown sequence {seq_id!r} (never added, or already finished)") from None

    def _check_length(self, seq_id: Hashable, num_tokens: int) -> None:
        if not is_whole(num_tokens) or num_tokens < 0:
            raise ValueError(f"sequence {seq_id!r}: token count must be a non-negative integer, got {num_tokens!r}")
        if self.max_seq_len is not None and num_tokens > self.max_seq_len:
            raise ValueError(f"sequence {seq_id!r}: {num_tokens} tokens exceed max_seq_len={self.max_seq_len}")
        if blocks_needed(num_tokens, self.block_size) > self.pool.num_blocks:
            raise OutOfBlocksError(
                f"sequence {seq_id!r}: {num_tokens} tokens need {blocks_needed(num_tokens, self.block_size)} "
                f"blocks but the whole pool has {self.pool.num_blocks}"
            )
