"""Chapter 8's three functions, composed into the prefix cache the engine runs.

The reader writes list-and-dict functions: ``block_hashes`` (the hash chain), ``cached_prefix_blocks``
(the checked lookup over ``table``, hash -> block, and ``holds``, block -> ``(parent_hash, tokens)``)
and ``free_blocks`` (vLLM v1's free order; ``touch`` too, or the pool's own). The engine asks a
:class:`~pagedkv_edu.core.protocols.PrefixCacheLike` over a :class:`BlockPool`. The design:

* **The state is the exercise's.** :class:`ReaderPrefixCache` keeps exactly ``table`` and ``holds``
  (the first block's parent is None, as in the exercise), and its lookup is the reader's
  ``cached_prefix_blocks`` over them, read-only. Eviction is the pool's lazy one (``on_reuse``): a
  block handed out again leaves both, as in the shipped cache, so the two find the same blocks.
* **One chain, the reader's.** The record hashes a block once, when it fills, with the cache's
  ``hasher`` (a per-block step: it cannot call a whole-chain function), and the manager registers
  blocks under those hashes. The step is the shipped SHA-256 with None as the first parent, so a
  right chain gives the shipped cache's bytes. Every lookup runs the reader's ``block_hashes`` on
  the prompt and refuses a chain that is not the record's, so every hash a lookup can match is
  the reader's chain's; the reader's lookup then hashes from the ids, as the exercise has it.
* **The free queue's order is the reader's.** :class:`ReaderBlockPool` is a :class:`BlockPool`
  whose ``free_all`` (and ``free``, ``touch``) run the reader's functions on a list copy of its
  real queue and reference counts, then adopt the result. The shipped pool is unchanged for
  everyone else; allocation and eviction (from the queue's front) stay the pool's.
* **Checked, every call.** A hit is used only if each block it names holds block *i* of this
  prompt after its parent, and the prompt's last token stays to compute; a release (a hit) must
  leave each count one lower (higher) and the queue holding exactly the free blocks, in any order
  (an order is a policy: chapter 8's grader judges it). Anything else stops the engine with a
  :class:`~pagedkv_edu.engine.guards.PartError` naming the part, the call and the value, so a
  reader's part can never hand a request another prefix's K/V or a block in use.

:meth:`ReaderFunctions.memory` builds the engine's block manager with this cache, called as
:class:`BlockManager` is; ``load_parts`` uses it once ``my_engine/prefix_cache.py`` passed chapter 8.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NoReturn

from ..core.block_manager import BlockManager
from ..core.block_pool import BlockPool
from ..core.prefix_cache import ROOT_HASH, BlockHash, BlockHasher, HashFn, PrefixHit, hash_block
from ..core.swap import SwapSpace
from ..engine.guards import PartError
from ..specs import hit_rate
from .grading import as_int_list, describe_exception, short
from .messages import tr

FUNCTIONS = ("block_hashes", "cached_prefix_blocks", "free_blocks")
"""What a reader's chapter-8 module must define (``touch`` is optional: the pool's own otherwise)."""


@dataclass(frozen=True)
class NoneRoot:
    """``base`` as the exercise calls a hash: a first block's parent is None (the engine's is ``ROOT_HASH``).

    Equal for equal bases, so records hashed under one cache's hasher are accepted by another's.
    """

    base: HashFn = hash_block

    def __call__(self, parent: BlockHash | None, token_ids: Sequence[int]) -> BlockHash:
        return self.base(ROOT_HASH if parent is None else parent, token_ids)


@dataclass(frozen=True)
class ReaderFunctions:
    """A reader's chapter-8 functions, and the name their messages give the part."""

    block_hashes: Callable[..., Any]
    cached_prefix_blocks: Callable[..., Any]
    free_blocks: Callable[..., Any]
    touch: Callable[..., Any] | None = None
    part: str = tr("your prefix cache")

    @classmethod
    def of(cls, module: object, part: str = tr("your prefix cache")) -> "ReaderFunctions":
        """The functions ``module`` (a reader's file, or any object holding them) defines; its ``touch`` if any."""
        missing = [name for name in FUNCTIONS if not callable(getattr(module, name, None))]
        if missing:
            raise ValueError(f"{part}: {getattr(module, '__file__', module)} defines no {', '.join(missing)}")
        block_hashes, lookup, free_blocks = (getattr(module, name) for name in FUNCTIONS)
        return cls(block_hashes, lookup, free_blocks, getattr(module, "touch", None), part)

    def memory(self, num_blocks: int, block_size: int, max_seq_len: int | None = None, *,
               enable_prefix_caching: bool = True, hash_fn: HashFn = hash_block, watermark_blocks: int = 0,
               swap: SwapSpace | None = None) -> BlockManager:
        """The package's block manager with this prefix cache, called as :class:`BlockManager` is.

        Without ``enable_prefix_caching`` it is the shipped manager, as it would be: no cache, and
        the free queue first in, first out (chapters 2-7).
        """
        manager = BlockManager(num_blocks, block_size, max_seq_len, watermark_blocks=watermark_blocks, swap=swap)
        if enable_prefix_caching:     # the pool swapped for one the reader's order runs, as BlockManager.over swaps
            manager.pool = ReaderBlockPool(num_blocks, block_size, self)
            manager.prefix_cache = ReaderPrefixCache(manager.pool, self, hash_fn)
        return manager

    def run(self, call: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one of the reader's functions; whatever it raises stops the engine as the part's failure, named."""
        try:
            return fn(*args)
        except Exception as exc:   # noqa: BLE001 (a reader's code can raise anything: name it, keep the cause)
            raise PartError(tr("{part}: {call} {error}", part=self.part, call=call,
                               error=describe_exception(exc))) from exc

    def fail(self, call: str, why: str) -> NoReturn:
        """Stop the engine: the reader's ``call`` answered something the engine must not use, and ``why``."""
        raise PartError(tr("{part}: {call}: {why}", part=self.part, call=call, why=why))


def _named(block_hash: Any) -> str:
    """A hash as a message shows it: SHA-256 bytes by their first hex digits, anything else by its repr."""
    return f"{block_hash.hex()[:12]}..." if isinstance(block_hash, bytes) and block_hash else short(block_hash)


class ReaderBlockPool(BlockPool):
    """A pool whose free queue the reader's ``free_blocks`` (and ``touch``) order, checked after each call."""

    def __init__(self, num_blocks: int, block_size: int, functions: ReaderFunctions) -> None:
        super().__init__(num_blocks, block_size)
        self.functions = functions

    def free(self, block_id: int) -> bool:
        """Drop one reference (through the reader's ``free_blocks``); True when the block became free."""
        self._check_id(block_id)
        if self.ref_counts[block_id] == 0:
            raise ValueError(f"block {block_id} is already free (double free)")
        self.free_all([block_id])
        return self.ref_counts[block_id] == 0

    def free_all(self, block_ids: Iterable[int]) -> None:
        """The reader's ``free_blocks`` on the queue and the counts, after the shipped pool's checks of the ids."""
        ids = list(block_ids)
        want = list(self.ref_counts)
        for block_id in ids:
            self._check_id(block_id)
            if want[block_id] == 0:
                raise ValueError(f"block {block_id} would be freed more times than it is referenced")
            want[block_id] -= 1
        cached = {b for b in ids if self.is_cached is not None and self.is_cached(b)}
        queue, refs = list(self._free), list(self.ref_counts)
        call = tr("free_blocks(free_queue={queue}, ref_counts=<{count} counts>, blocks={blocks}, cached={cached})",
                  queue=short(queue), count=len(refs), blocks=short(ids), cached=short(sorted(cached)))
        self.functions.run(call, self.functions.free_blocks, queue, refs, list(ids), cached)
        now_free = set(self._free) | {b for b in ids if want[b] == 0}
        self._adopt(call, queue, refs, want, now_free)

    def touch(self, block_id: int) -> None:
        """A hit's reference, taken by the reader's ``touch`` if they wrote one (else the pool's own)."""
        if self.functions.touch is None:
            super().touch(block_id)
            return
        self._check_id(block_id)
        queue, refs = list(self._free), list(self.ref_counts)
        want = list(refs)
        want[block_id] += 1
        call = tr("touch(free_queue={queue}, ref_counts=<{count} counts>, block={block})", queue=short(queue),
                  count=len(refs), block=block_id)
        self.functions.run(call, self.functions.touch, queue, refs, block_id)
        self._adopt(call, queue, refs, want, set(self._free) - {block_id})

    def _adopt(self, call: str, queue: list[int], refs: list[int], want: list[int], free: set[int]) -> None:
        """Make the reader's queue and counts the pool's, if the counts are ``want`` and the queue holds ``free``."""
        if refs != want:
            counts, problem = as_int_list(refs, tr("reference count"))
            if counts is None:
                self.functions.fail(call, tr("ref_counts: {problem}", problem=problem))
            if len(counts) != len(want):
                self.functions.fail(call, tr("ref_counts has {count} counts for {blocks} blocks", count=len(counts),
                                             blocks=len(want)))
            block = next(b for b, (got, expected) in enumerate(zip(counts, want)) if got != expected)
            self.functions.fail(call, tr("block {block}'s reference count is {got}, expected {expected} (it was "
                                         "{was}; a release drops one reference, a hit adds one)", block=block,
                                         got=counts[block], expected=want[block], was=self.ref_counts[block]))
        order, problem = (queue, "") if all(type(b) is int for b in queue) else as_int_list(queue, tr("block id"))
        if order is None:
            self.functions.fail(call, tr("the free queue: {problem}", problem=problem))
        if len(order) != len(free) or set(order) != free:
            in_use, lost = sorted(set(order) - free), sorted(free - set(order))
            twice = sorted({b for b in order if order.count(b) > 1})
            wrong = ([tr("blocks {blocks} are in use (nobody else may be handed them)", blocks=in_use)]
                     if in_use else []) \
                + ([tr("free blocks {blocks} are missing (never handed out again)", blocks=lost)] if lost else []) \
                + ([tr("blocks {blocks} are in it twice", blocks=twice)] if twice else [])
            self.functions.fail(call, tr("the free queue is {queue}: {problems}", queue=short(order, 80),
                                         problems=str(tr("; ")).join(str(w) for w in wrong)))   # rendered now
        self._free = OrderedDict.fromkeys(order)
        self.ref_counts[:] = want


class ReaderPrefixCache:
    """The engine's prefix cache (``PrefixCacheLike``) run by the reader's hash chain and checked lookup."""

    def __init__(self, pool: BlockPool, functions: ReaderFunctions, hash_fn: HashFn = hash_block) -> None:
        if pool.on_reuse is not None:
            raise ValueError("this pool already has a prefix cache; one pool, one cache")
        self.pool = pool
        self.functions = functions
        self.hasher = BlockHasher(pool.block_size, NoneRoot(hash_fn))
        self.table: dict[Hashable, int] = {}                                    # hash -> block
        self.holds: dict[int, tuple[Hashable | None, tuple[int, ...]]] = {}      # block -> (parent hash, tokens)
        self._hash_of: dict[int, Hashable] = {}
        self.queried_tokens = 0
        self.hit_tokens = 0
        self.num_evictions = 0
        pool.on_reuse = self._evict
        pool.is_cached = self.__contains__

    # --- lookup ------------------------------------------------------------------------
    def lookup(self, token_ids: Sequence[int], hashes: Sequence[BlockHash]) -> PrefixHit:
        """The reader's lookup of ``token_ids``, after their chain was checked against the record's ``hashes``."""
        size, ids = self.pool.block_size, list(token_ids)
        chain = self._chain(ids, hashes)
        call = tr("cached_prefix_blocks({ids} ({count} tokens), {size}, hash_fn, table, holds)", ids=short(ids),
                  count=len(ids), size=size)
        found = self.functions.run(call, self.functions.cached_prefix_blocks, ids, size, self.hasher.hash_fn,
                                    MappingProxyType(self.table), MappingProxyType(self.holds))   # read-only views
        blocks, problem = as_int_list(found, tr("block id"))
        if blocks is None:
            self.functions.fail(call, problem)
        self._check_hit(call, blocks, ids, chain)
        return PrefixHit(tuple(blocks), len(blocks) * size)

    def _chain(self, ids: list[int], hashes: Sequence[BlockHash]) -> list[Hashable]:
        """The reader's ``block_hashes`` of the prompt, refused unless it is one hash per full block, the record's."""
        size = self.pool.block_size
        call = tr("block_hashes({ids} ({count} tokens), {size}, hash_fn)", ids=short(ids), count=len(ids), size=size)
        chain = self.functions.run(call, self.functions.block_hashes, list(ids), size, self.hasher.hash_fn)
        if not isinstance(chain, (list, tuple)):
            self.functions.fail(call, tr("returned {value}: return a list of hashes, one per full block",
                                         value=short(chain)))
        if len(chain) != len(ids) // size:
            self.functions.fail(call, tr("returned {count} hashes; {tokens} tokens fill {blocks} blocks of {size} (a "
                                         "partly filled last block has no hash)", count=len(chain), tokens=len(ids),
                                         blocks=len(ids) // size, size=size))
        for i, (mine, engine) in enumerate(zip(chain, hashes)):
            if mine != engine:
                self.functions.fail(call, tr("hash {i} is {mine}, but the engine's chain, which its blocks are "
                                             "registered under, has {engine} (block i's hash is hash_fn(block i - 1's "
                                             "hash, its tokens), the first block's parent None)", i=i,
                                             mine=_named(mine), engine=_named(engine)))
        return list(chain)

    def _check_hit(self, call: str, blocks: list[int], ids: list[int], chain: list[Hashable]) -> None:
        """Refuse a hit that would give the request K/V other than its prefix's, or none for its last token."""
        size, pool = self.pool.block_size, self.pool
        if len(blocks) * size > len(ids) - 1:
            self.functions.fail(call, tr("returned {count} blocks, {hit} of {tokens} tokens: the last token must be "
                                         "left to compute", count=len(blocks), hit=len(blocks) * size,
                                         tokens=len(ids)))
        for i, block in enumerate(blocks):
            if not 0 <= block < pool.num_blocks:
                self.functions.fail(call, tr("returned {blocks}: block {block} is outside the pool of {count} blocks",
                                             blocks=short(blocks), block=block, count=pool.num_blocks))
            if block not in self.holds:
                state = tr("free and caches nothing") if pool.ref_counts[block] == 0 else \
                    tr("in use and caches nothing")
                self.functions.fail(call, tr("returned {blocks}: block {block} is {state} (evicted, or never a full "
                                             "block); only a block in holds can be a hit", blocks=short(blocks),
                                             block=block, state=state))
            pair = (chain[i - 1] if i else None, tuple(ids[i * size:(i + 1) * size]))
            held = self.holds[block]
            if held != pair:
                self.functions.fail(call, tr("returned {blocks}: block {block} holds tokens {held} after parent "
                                             "{parent}, not block {i} of this prompt ({wanted} after "
                                             "{wanted_parent}): its K/V are another prefix's", blocks=short(blocks),
                                             block=block, held=short(list(held[1])), parent=_named(held[0]), i=i,
                                             wanted=short(list(pair[1])), wanted_parent=_named(pair[0])))
        if len(set(blocks)) != len(blocks):     # each holds its pair, yet one block at two places of a table
            self.functions.fail(call, tr("returned {blocks}, a block twice", blocks=short(blocks)))

    def record(self, queried: int, hit: int) -> None:
        """Count one admission's lookup in the statistics."""
        self.queried_tokens += queried
        self.hit_tokens += hit

    @property
    def lookup_hit_rate(self) -> float:
        """Tokens found over tokens looked up, at every lookup (as :attr:`PrefixCache.lookup_hit_rate`)."""
        return hit_rate(self.hit_tokens, self.queried_tokens)

    # --- filling and eviction ------------------------------------------------------------
    def insert(self, block_id: int, block_hash: BlockHash, parent_hash: BlockHash, token_ids: Sequence[int]) -> bool:
        """Make a full block findable, as :meth:`PrefixCache.insert` does: False if the hash or the block is taken."""
        self.pool._check_id(block_id)
        if len(token_ids) != self.pool.block_size:
            raise ValueError(f"only full blocks are cached: block {block_id} has {len(token_ids)} of "
                             f"{self.pool.block_size} tokens")
        if self.pool.ref_counts[block_id] == 0:
            raise ValueError(f"block {block_id} is free; only a block someone holds can be cached")
        if block_hash in self.table or block_id in self.holds:
            return False
        self.table[block_hash] = block_id
        self.holds[block_id] = (None if parent_hash == ROOT_HASH else parent_hash, tuple(token_ids))
        self._hash_of[block_id] = block_hash
        return True

    def _evict(self, block_id: int) -> None:
        """The pool is handing ``block_id`` out again: it leaves ``holds`` and ``table`` (lazy eviction)."""
        if self.holds.pop(block_id, None) is not None:
            del self.table[self._hash_of.pop(block_id)]
            self.num_evictions += 1

    def __contains__(self, block_id: int) -> bool:
        return block_id in self.holds

    def __repr__(self) -> str:    # rendered now, in the reader's language: a repr is printed as it is
        return str(tr("ReaderPrefixCache({part}: {count} cached blocks, lookup hit rate {rate:.1%} = {hit}/{queried} "
                      "tokens, {evictions} evictions)", part=self.functions.part, count=len(self.holds),
                      rate=self.lookup_hit_rate, hit=self.hit_tokens, queried=self.queried_tokens,
                      evictions=self.num_evictions))


__all__ = ["FUNCTIONS", "NoneRoot", "ReaderBlockPool", "ReaderFunctions", "ReaderPrefixCache"]
