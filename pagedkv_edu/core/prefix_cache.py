"""Automatic prefix caching: find blocks whose K/V another request already computed (chapter 8).

vLLM v1's rules, taught in chapter 8: only full blocks, under a hash chain
``hash(parent_hash, token_ids)`` (SHA-256); a hit takes a reference (``BlockPool.touch``);
eviction is lazy (``BlockPool.on_reuse``); the hit is capped one token short of the prompt.
The cache is bookkeeping only: the block manager decides what to register and when.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .block_pool import BlockPool
from ..specs import hit_rate
from ..checks import check_token_ids

BlockHash = bytes
HashFn = Callable[[BlockHash, Sequence[int]], BlockHash]

ROOT_HASH: BlockHash = b""
"""The parent hash of a sequence's first block."""


def hash_block(parent: BlockHash, token_ids: Sequence[int]) -> BlockHash:
    """SHA-256 of the parent block's hash followed by the block's token ids as little-endian int64.

    Not Python's ``hash()`` (64 bits, version-dependent, collidable on purpose: CVE-2025-25183),
    nor nano-vllm's xxhash (not a dependency; at this book's sizes hashing is not the cost).

    vLLM adds "extra keys" to the tuple for what must not mix although the tokens agree (a
    LoRA adapter, an image, a per-tenant ``cache_salt``); this book's requests have none.
    """
    digest = hashlib.sha256(parent)
    digest.update(np.asarray(token_ids, dtype="<i8").tobytes())
    return digest.digest()


@dataclass(frozen=True, eq=False)
class CachedBlock:
    """What a cached block was stored under: compared on every hit, against collisions.

    The parent's *record* is compared, not its hash: once the parent is evicted, a colliding
    prefix could be cached under that hash, and its children would find blocks computed after
    another prefix. ``eq=False``: two records are equal only if they are the same registration.
    """

    block_hash: BlockHash
    parent: "CachedBlock | None"     # the record of the block before it; None for a first block
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class PrefixHit:
    """The longest cached prefix of a prompt: its blocks and their hash chain."""

    block_ids: tuple[int, ...]
    hashes: tuple[BlockHash, ...]
    num_tokens: int


class PrefixCache:
    """A table from block hash to physical block over one :class:`BlockPool`, with hit statistics."""

    def __init__(self, pool: BlockPool, hash_fn: HashFn = hash_block) -> None:
        if not callable(hash_fn):
            raise ValueError(f"hash_fn must be a function of (parent hash, token ids), got {hash_fn!r}")
        if pool.on_reuse is not None:
            raise ValueError("this pool already has a prefix cache; one pool, one cache")
        self.pool = pool
        self.hash_fn = hash_fn
        self._block_of: dict[BlockHash, int] = {}
        self._key_of: dict[int, CachedBlock] = {}
        self.queried_tokens = 0    # tokens looked up at admission (prompt, plus outputs after a preemption)
        self.hit_tokens = 0        # of those, found in the cache: prefill tokens saved
        self.num_evictions = 0
        pool.on_reuse = self._evict
        pool.is_cached = self.__contains__    # the free queue keeps cached blocks longest (vLLM v1, c59cb79)

    # --- hashing -----------------------------------------------------------------------
    def chain(self, token_ids: Sequence[int], known: Sequence[BlockHash] = ()) -> list[BlockHash]:
        """The hash of every full block of ``token_ids``: each one names the whole prefix up to it.

        ``known`` are the hashes of the first blocks, computed before (a lookup's hit): they
        are kept, and hashing continues after them.
        """
        token_ids = check_token_ids(token_ids)
        size, hashes = self.pool.block_size, list(known)
        for first in range(len(hashes) * size, len(token_ids) - size + 1, size):
            hashes.append(self.hash_fn(hashes[-1] if hashes else ROOT_HASH, token_ids[first:first + size]))
        return hashes

    # --- lookup --------------------------------------------------------------------------
    def lookup(self, token_ids: Sequence[int], hashes: Sequence[BlockHash] | None = None) -> PrefixHit:
        """The longest cached prefix of full blocks, capped at ``len(token_ids) - 1`` tokens.

        Takes no reference and changes no statistic: the scheduler asks this to count the
        blocks an admission needs, and may then not admit. ``hashes``, the ids' chain computed
        before (the engine's request record hashes each block once), are used instead of hashing.
        """
        if hashes is None:
            token_ids = check_token_ids(token_ids)
        size = self.pool.block_size
        usable = max(0, len(token_ids) - 1) // size      # at least one token left to compute
        known = hashes or ()
        blocks: list[int] = []
        found: list[BlockHash] = []
        parent: CachedBlock | None = None
        for i in range(usable):
            tokens = tuple(token_ids[i * size:(i + 1) * size])
            block_hash = known[i] if i < len(known) else self.hash_fn(found[-1] if found else ROOT_HASH, tokens)
            record = self._key_of.get(self._block_of.get(block_hash, -1))
            if record is None or record.token_ids != tokens or record.parent is not parent:
                break     # not cached, or a collision: same hash, other tokens or another prefix
            blocks.append(self._block_of[block_hash])
            found.append(block_hash)
            parent = record
        return PrefixHit(tuple(blocks), tuple(found), len(blocks) * size)

    def record(self, queried: int, hit: int) -> None:
        """Count one admission's lookup in the statistics."""
        self.queried_tokens += queried
        self.hit_tokens += hit

    @property
    def lookup_hit_rate(self) -> float:
        """Tokens found over tokens looked up, at every lookup: a preempted request finding its own blocks
        again counts too. Not the prefix hit rate (:func:`~pagedkv_edu.hit_rate` over first
        admissions, ``EngineStats.prefix_hit_rate``), which counts only sharing between requests."""
        return hit_rate(self.hit_tokens, self.queried_tokens)

    # --- filling and eviction ------------------------------------------------------------
    def insert(self, block_id: int, block_hash: BlockHash, parent_block: int | None,
               token_ids: Sequence[int]) -> bool:
        """Make a computed, full block findable after ``parent_block`` (None: a first block).

        False if an equal (or colliding) block is there already, or if the parent block is
        not findable itself (then no lookup could reach this one). When two requests computed
        the same prefix in the same step, the first block stays the cached one and the second
        is an ordinary block that will not be found.
        """
        self.pool._check_id(block_id)
        if len(token_ids) != self.pool.block_size:
            raise ValueError(f"only full blocks are cached: block {block_id} has {len(token_ids)} of "
                             f"{self.pool.block_size} tokens")
        if self.pool.ref_counts[block_id] == 0:
            raise ValueError(f"block {block_id} is free; only a block someone holds can be cached")
        parent = None if parent_block is None else self._key_of.get(parent_block)
        if block_hash in self._block_of or block_id in self._key_of or (parent_block is not None and parent is None):
            return False
        self._block_of[block_hash] = block_id
        self._key_of[block_id] = CachedBlock(block_hash, parent, tuple(token_ids))
        return True

    def discard(self, block_id: int) -> bool:
        """Make ``block_id`` unfindable (it was registered but never written); True if it was cached."""
        key = self._key_of.pop(block_id, None)
        if key is not None:
            del self._block_of[key.block_hash]
        return key is not None

    def _evict(self, block_id: int) -> None:
        """The pool is handing ``block_id`` out again: forget what it held (lazy eviction)."""
        self.num_evictions += self.discard(block_id)

    # --- reading -------------------------------------------------------------------------
    def __contains__(self, block_id: int) -> bool:
        return block_id in self._key_of

    @property
    def num_cached_blocks(self) -> int:
        """Blocks findable now, in use or free."""
        return len(self._key_of)

    def cached_free_blocks(self) -> list[int]:
        """Free blocks that still hold cached K/V, in eviction order (first evicted first)."""
        return [b for b in self.pool.free_ids() if b in self._key_of]

    def __repr__(self) -> str:
        return (f"PrefixCache({self.num_cached_blocks} cached blocks, lookup hit rate {self.lookup_hit_rate:.1%} "
                f"= {self.hit_tokens}/{self.queried_tokens} tokens, {self.num_evictions} evictions)")
