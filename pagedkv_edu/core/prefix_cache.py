"""Automatic prefix caching: find blocks whose K/V another request already computed (chapter 8).

vLLM v1's rules, taught in chapter 8: only full blocks, under a hash chain
``hash(parent_hash, token_ids)`` (SHA-256); a hit takes a reference (``BlockPool.touch``);
eviction is lazy (``BlockPool.on_reuse``); the hit is capped one token short of the prompt.
A lookup matches a block by its hash, then checks what the block holds (its parent's hash and
its tokens), as chapter 8's exercise does: a weak hash that collides finds nothing wrong.
The cache is bookkeeping only: the block manager decides what to register and when.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..checks import check_token_ids
from ..specs import hit_rate
from .block_pool import BlockPool

BlockHash = bytes
HashFn = Callable[[BlockHash, Sequence[int]], BlockHash]

ROOT_HASH: BlockHash = b""
"""The parent hash of a sequence's first block."""


def hash_block(parent: BlockHash, token_ids: Sequence[int]) -> BlockHash:
    """SHA-256 of the parent block's hash followed by the block's token ids as little-endian int64.

    Not Python's ``hash()`` (64 bits, version-dependent, collidable on purpose: CVE-2025-25183),
    nor nano-vllm's xxhash (not a dependency; at this book's sizes hashing is not the cost).
    vLLM adds "extra keys" for what must not mix although the tokens agree (a LoRA adapter, an
    image, a per-tenant ``cache_salt``); this book's requests have none.
    """
    digest = hashlib.sha256(parent)
    digest.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    return digest.digest()


@dataclass(frozen=True)
class BlockHasher:
    """How a sequence's full blocks are named: a block size and a hash function (vLLM's ``block_hasher``).

    A request record is bound to one hasher for its life (it keeps the hashes it made), so a
    manager whose cache hashes differently refuses the record instead of reading stale hashes.
    """

    block_size: int
    hash_fn: HashFn = hash_block

    def chain(self, token_ids: Sequence[int], known: Sequence[BlockHash] = ()) -> list[BlockHash]:
        """The hash of every full block of ``token_ids``, continuing after the ``known`` first ones."""
        size, hashes = self.block_size, list(known)
        for first in range(len(hashes) * size, len(token_ids) - size + 1, size):
            hashes.append(self.hash_fn(hashes[-1] if hashes else ROOT_HASH, token_ids[first:first + size]))
        return hashes


@dataclass(frozen=True)
class PrefixHit:
    """The longest cached prefix of a sequence: its blocks, and the tokens they hold."""

    block_ids: tuple[int, ...] = ()
    num_tokens: int = 0


NO_HIT = PrefixHit()
"""What a lookup finds without a prefix cache, or for a sequence whose K/V come back from host memory."""


@dataclass(frozen=True)
class CachedBlock:
    """What a cached block holds, checked on every hit: its hash, its parent's hash and its tokens."""

    block_hash: BlockHash
    parent_hash: BlockHash
    token_ids: tuple[int, ...]


class PrefixCache:
    """A table from block hash to physical block over one :class:`BlockPool`, with hit statistics."""

    def __init__(self, pool: BlockPool, hash_fn: HashFn = hash_block) -> None:
        if not callable(hash_fn):
            raise ValueError(f"hash_fn must be a function of (parent hash, token ids), got {hash_fn!r}")
        if pool.on_reuse is not None:
            raise ValueError("this pool already has a prefix cache; one pool, one cache")
        self.pool = pool
        self.hasher = BlockHasher(pool.block_size, hash_fn)
        self._block_of: dict[BlockHash, int] = {}
        self._held: dict[int, CachedBlock] = {}
        self.queried_tokens = 0    # tokens looked up at admission (prompt, plus outputs after a preemption)
        self.hit_tokens = 0        # of those, found in the cache: prefill tokens saved
        self.num_evictions = 0
        pool.on_reuse = self._evict
        pool.is_cached = self.__contains__    # the free queue keeps cached blocks longest (vLLM v1, c59cb79)

    @property
    def hash_fn(self) -> HashFn:
        return self.hasher.hash_fn

    def chain(self, token_ids: Sequence[int], known: Sequence[BlockHash] = ()) -> list[BlockHash]:
        """The hash of every full block of ``token_ids`` (after checking the ids)."""
        return self.hasher.chain(check_token_ids(token_ids), known)

    # --- lookup ------------------------------------------------------------------------
    def lookup(self, token_ids: Sequence[int], hashes: Sequence[BlockHash]) -> PrefixHit:
        """The longest cached prefix of full blocks, capped at ``len(token_ids) - 1`` tokens.

        ``hashes`` are the ids' chain (hashed once, on the request's record). Takes no reference
        and changes no statistic: the scheduler asks before it knows it can admit.
        """
        size = self.pool.block_size
        blocks: list[int] = []
        parent = ROOT_HASH
        for i in range(min(len(hashes), (len(token_ids) - 1) // size)):   # at least one token left to compute
            block = self._block_of.get(hashes[i])
            held = self._held.get(block) if block is not None else None
            if held is None or held.parent_hash != parent or held.token_ids != tuple(token_ids[i * size:(i + 1) * size]):
                break     # not cached, or a collision: the block holds another pair
            blocks.append(block)
            parent = hashes[i]
        return PrefixHit(tuple(blocks), len(blocks) * size)

    def record(self, queried: int, hit: int) -> None:
        """Count one admission's lookup in the statistics."""
        self.queried_tokens += queried
        self.hit_tokens += hit

    @property
    def lookup_hit_rate(self) -> float:
        """Tokens found over tokens looked up, at every lookup: a preempted request finding its own blocks
        again counts too. Not the prefix hit rate (``TokenCounts.prefix_hit_rate``, first admissions
        only), which counts only sharing between requests."""
        return hit_rate(self.hit_tokens, self.queried_tokens)

    # --- filling and eviction ------------------------------------------------------------
    def insert(self, block_id: int, block_hash: BlockHash, parent_hash: BlockHash, token_ids: Sequence[int]) -> bool:
        """Make a full block findable under ``block_hash`` (its parent's hash is ``ROOT_HASH`` for a first block).

        False if the hash is taken already (two requests computed the same prefix: the first stays
        the cached one) or the block holds another registration. The manager registers a table
        front to back and stops at a block whose parent block is not the cached one, so a cached
        block's parent is cached too, and (freed tail first) the parent is evicted after it.
        """
        self.pool._check_id(block_id)
        if len(token_ids) != self.pool.block_size:
            raise ValueError(f"only full blocks are cached: block {block_id} has {len(token_ids)} of "
                             f"{self.pool.block_size} tokens")
        if self.pool.ref_counts[block_id] == 0:
            raise ValueError(f"block {block_id} is free; only a block someone holds can be cached")
        if block_hash in self._block_of or block_id in self._held:
            return False
        self._block_of[block_hash] = block_id
        self._held[block_id] = CachedBlock(block_hash, parent_hash, tuple(token_ids))
        return True

    def _evict(self, block_id: int) -> None:
        """The pool is handing ``block_id`` out again: forget what it held (lazy eviction)."""
        held = self._held.pop(block_id, None)
        if held is not None:
            del self._block_of[held.block_hash]
            self.num_evictions += 1

    # --- reading -------------------------------------------------------------------------
    def __contains__(self, block_id: int) -> bool:
        return block_id in self._held

    def holds(self, block_id: int) -> CachedBlock | None:
        """What ``block_id`` is cached as, or None."""
        return self._held.get(block_id)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks findable now, in use or free."""
        return len(self._held)

    def cached_free_blocks(self) -> list[int]:
        """Free blocks that still hold cached K/V, in eviction order (first evicted first)."""
        return [b for b in self.pool.free_ids() if b in self._held]

    def __repr__(self) -> str:
        return (f"PrefixCache({self.num_cached_blocks} cached blocks, lookup hit rate {self.lookup_hit_rate:.1%} "
                f"= {self.hit_tokens}/{self.queried_tokens} tokens, {self.num_evictions} evictions)")
