"""The block hash chain beside the radix tree, and the free queue's two orders, on one stream of prompts (chapter 8).

Both caches get the same prompts, room and running limit, and both cap a hit one token short,
so only whole blocks against single tokens, and the eviction order, differ. No model runs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.block_manager import BlockManager
from ..core.block_pool import FREE_ORDERS, FreeOrder
from ..core.request import Request as Record
from ..specs import hit_rate
from ..checks import check_whole
from .radix_cache import RadixCache, RadixNode


@dataclass(frozen=True)
class PrefixReplay:
    """What one cache found over a stream of prompts."""

    cache: str                  # "hash chain, B=16" or "radix tree"
    queried_tokens: int
    hit_tokens: int
    cached_tokens: int          # tokens findable at the end (the K/V the cache still keeps)
    slots_held: int             # K/V slots holding anything at the end: whole blocks, or one slot per token
    evicted: int                # blocks (hash chain) or tokens (radix tree) evicted

    @property
    def hit_rate(self) -> float:
        return hit_rate(self.hit_tokens, self.queried_tokens)


def _check(prompts: Sequence[Sequence[int]], capacity_tokens: int, max_running: int) -> None:
    check_whole("capacity_tokens", capacity_tokens, 1)
    check_whole("max_running", max_running, 1)
    longest = max((len(p) for p in prompts), default=0)
    if longest > capacity_tokens:
        raise ValueError(f"a prompt of {longest} tokens does not fit capacity_tokens={capacity_tokens}")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")


def set_free_order(manager: BlockManager, free_order: FreeOrder) -> None:
    """Let ``manager``'s pool place freed blocks by ``free_order`` (its prefix cache tells it which are cached)."""
    if manager.prefix_cache is None:
        raise ValueError("the free queue's order matters only with prefix caching on")
    if free_order not in FREE_ORDERS:
        raise ValueError(f"free_order must be one of {FREE_ORDERS}, got {free_order!r}")
    manager.pool.free_order = free_order


def replay_hash_chain(prompts: Sequence[Sequence[int]], block_size: int, capacity_tokens: int, max_running: int,
                      free_order: FreeOrder = "vllm-v1") -> PrefixReplay:
    """The package's block manager with prefix caching, freeing blocks in ``free_order``."""
    _check(prompts, capacity_tokens, max_running)
    manager = BlockManager(capacity_tokens // block_size, block_size, enable_prefix_caching=True)
    set_free_order(manager, free_order)
    running: deque[Record] = deque()
    hits = 0
    for i, prompt in enumerate(prompts):
        seq = Record(i, list(prompt))
        while len(running) >= max_running:
            manager.release(running.popleft())
        hit = manager.lookup(seq)
        while manager.admit(seq, seq.num_tokens - hit.num_tokens, hit) is None:
            manager.release(running.popleft())      # the oldest finishes; its cached blocks stay findable
        hits += hit.num_tokens
        running.append(seq)
    cache = manager.prefix_cache
    assert cache is not None
    held = manager.pool.num_used + len(cache.cached_free_blocks())
    return PrefixReplay(f"hash chain, B={block_size}", sum(map(len, prompts)), hits,
                        cache.num_cached_blocks * block_size, held * block_size, cache.num_evictions)


def replay_radix(prompts: Sequence[Sequence[int]], capacity_tokens: int, max_running: int) -> PrefixReplay:
    """SGLang's radix tree (page size 1): match, insert the prompt, lock it while the request runs."""
    _check(prompts, capacity_tokens, max_running)
    tree = RadixCache(capacity_tokens)
    running: deque[RadixNode] = deque()
    hits = 0
    for prompt in prompts:
        while running and (len(running) >= max_running or
                           tree.capacity_tokens - tree.num_tokens + tree.evictable_tokens < len(prompt)):
            tree.unlock(running.popleft())
        hits += tree.match_prefix(prompt[:-1])[0]
        tree.insert(prompt)
        node = tree.match_prefix(prompt)[1]
        tree.lock(node)
        running.append(node)
    return PrefixReplay("radix tree", sum(map(len, prompts)), hits, tree.num_tokens, tree.num_tokens,
                        tree.num_evicted_tokens)


def compare_by_block_size(prompts: Sequence[Sequence[int]], block_sizes: Sequence[int], capacity_tokens: int,
                          max_running: int) -> list[tuple[int, PrefixReplay, PrefixReplay]]:
    """For each block size: the hash chain's replay and the radix tree's (which has no block size)."""
    radix = replay_radix(prompts, capacity_tokens, max_running)
    return [(b, replay_hash_chain(prompts, b, capacity_tokens, max_running), radix) for b in block_sizes]


def hit_rate_by_free_order(prompts: Sequence[Sequence[int]], block_size: int, capacity_tokens: int,
                           max_running: int) -> dict[str, PrefixReplay]:
    """The same prompts under vLLM v1's free-queue order (c59cb79) and the older one (both appended)."""
    return {order: replay_hash_chain(prompts, block_size, capacity_tokens, max_running, order)
            for order in FREE_ORDERS}


def second_turns(prompts: Sequence[Sequence[int]], reply_tokens: int, question_tokens: int, seed: int = 0,
                 vocab: tuple[int, int] = (100, 49152)) -> list[list[int]]:
    """Each conversation's second turn: its first prompt, a reply and a new question (stand-in ids).

    A chat client resends the whole conversation, so the second turn's prompt starts with the
    first turn's, partial last block included.
    """
    check_whole("reply_tokens", reply_tokens)
    check_whole("question_tokens", question_tokens)
    rng = np.random.default_rng([seed, 3])
    return [list(p) + [int(t) for t in rng.integers(*vocab, size=reply_tokens + question_tokens)] for p in prompts]
