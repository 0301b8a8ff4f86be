"""Automatic prefix caching in the block manager: hits, the num_tokens - 1 cap, lazy LRU eviction, collisions."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_pool import BlockPool
from pagedkv_edu.core.prefix_cache import ROOT_HASH, HashFn, PrefixCache, hash_block
from pagedkv_edu.core.request import Request
from pagedkv_edu.sim.sharing import few_shot_max_seq_len, few_shot_variant
from pagedkv_edu.sim.simulate import simulate
from pagedkv_edu.workload import copilot50

B = 4


def cached_manager(num_blocks: int = 16, hash_fn: HashFn = hash_block) -> BlockManager:
    return BlockManager(num_blocks, B, enable_prefix_caching=True, hash_fn=hash_fn)


def admit(m: BlockManager, seq_id: Hashable, tokens: list[int]) -> tuple[Request, int]:
    """Look a new sequence up, admit it, pretend its prefill ran; returns it and the tokens it found cached."""
    seq = Request(seq_id, tokens)
    hit = m.lookup(seq)
    assert m.admit(seq, len(tokens) - hit.num_tokens, hit) is not None
    seq.num_computed_tokens = len(tokens)
    return seq, hit.num_tokens


def cached_blocks(m: BlockManager, tokens: list[int]) -> tuple[int, ...]:
    """The blocks a prompt of ``tokens`` would find now (the lookup changes nothing)."""
    return m.prefix_cache.lookup(tokens, m.prefix_cache.chain(tokens)).block_ids


def cache_state(m: BlockManager) -> tuple:
    """Pool, tables, cache entries and statistics: what a refused admission leaves alone."""
    cache = m.prefix_cache
    return (m.pool.free_ids(), list(m.pool.ref_counts),
            [(sid, list(t.block_ids), t.num_tokens) for sid, t in m.tables.items()],
            {b: cache.holds(b) for b in range(m.pool.num_blocks)},
            (cache.queried_tokens, cache.hit_tokens, cache.num_evictions))


SYSTEM = list(range(100, 110))           # 10 tokens: two full blocks of 4 and half a block


def test_the_hash_is_a_chain_and_stable() -> None:
    first = hash_block(ROOT_HASH, [1, 2, 3, 4])
    assert first == hash_block(ROOT_HASH, (1, 2, 3, 4)) and len(first) == 32     # list or tuple: same bytes
    assert hash_block(first, [5, 6, 7, 8]) != hash_block(ROOT_HASH, [5, 6, 7, 8])  # the parent is part of it
    assert hash_block(ROOT_HASH, [1, 2, 3, 4]) != hash_block(ROOT_HASH, [4, 3, 2, 1])
    cache = PrefixCache(BlockPool(4, 4))
    assert cache.chain([1, 2, 3, 4, 5, 6, 7, 8, 9]) == [first, hash_block(first, [5, 6, 7, 8])]
    seq = Request("s", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert list(seq.block_hashes(cache.hasher)) == cache.chain(seq.token_ids)    # the record hashes the same chain


def test_a_second_request_reuses_the_shared_full_blocks_and_computes_the_rest() -> None:
    m = cached_manager()
    a, hit_a = admit(m, "a", SYSTEM + [1, 2, 3])
    b, hit_b = admit(m, "b", SYSTEM + [7, 8, 9, 10, 11])
    assert hit_a == 0 and hit_b == 8               # two full blocks; the half block is not shared
    ids_a, ids_b = m.block_ids(a), m.block_ids(b)
    assert ids_b[:2] == ids_a[:2] and ids_b[2] != ids_a[2]
    assert m.ref_count_of(b) == [2, 2, 1, 1]
    assert m.prefix_cache.lookup_hit_rate == pytest.approx(8 / (13 + 15))
    m.release(a)
    m.release(b)
    assert m.pool.num_free == m.pool.num_blocks


def test_a_prefix_shorter_than_one_block_never_hits() -> None:
    """vLLM #54607: only full blocks are cached, so a 3-token shared prefix at block size 4 gives 0 hits."""
    m = cached_manager()
    admit(m, "a", [1, 2, 3] + [10, 11, 12, 13, 14])
    assert admit(m, "b", [1, 2, 3] + [20, 21, 22, 23, 24])[1] == 0
    requests = copilot50(0, 8, length_scale=1 / 16)          # a 12-token system prompt
    assert simulate(requests, "paged", 2048, block_size=16, enable_prefix_caching=True).tokens.prefix_hit_tokens == 0
    assert simulate(requests, "paged", 2048, block_size=4,
                    enable_prefix_caching=True).tokens.prefix_hit_tokens == 7 * 12


def test_a_full_prompt_hit_on_a_block_multiple_still_computes_the_last_block() -> None:
    """nano-vllm #144: the hit is capped at num_tokens - 1, so a prompt of whole cached blocks recomputes one."""
    m = cached_manager()
    prompt = list(range(200, 208))                             # exactly two blocks
    a, _ = admit(m, "a", prompt)
    b, hit_b = admit(m, "b", prompt)
    assert hit_b == 4                                          # not 8: the last token must run for logits
    assert m.block_ids(b)[0] == m.block_ids(a)[0]
    assert m.block_ids(b)[1] != m.block_ids(a)[1]
    assert admit(m, "c", prompt + [1])[1] == 8                 # one more token: both blocks hit


def test_freed_blocks_stay_findable_until_reused_and_a_hit_takes_them_out_of_the_free_queue() -> None:
    m = cached_manager(8)
    a, _ = admit(m, "a", SYSTEM + [1, 2])                      # blocks 0, 1, 2
    m.release(a)
    assert m.pool.free_ids() == [3, 4, 5, 6, 7, 2, 1, 0]       # tail first: block 2 before the shared beginning
    assert m.prefix_cache.cached_free_blocks() == [2, 1, 0]
    before = cache_state(m)
    b = Request("b", SYSTEM + [5, 6, 7])
    hit = m.lookup(b)
    assert hit.block_ids == (0, 1) and cache_state(m) == before   # the lookup takes nothing and counts nothing
    # 13 tokens take 4 free blocks, not more: the two cached ones come back out of the middle of the queue.
    assert m.admit(b, 13 - hit.num_tokens, hit) == [0, 1, 3, 4]
    b.num_computed_tokens = 13
    assert m.pool.num_free == 8 - 4 and m.pool.free_ids() == [5, 6, 7, 2]
    assert m.prefix_cache.num_evictions == 0


def test_eviction_is_lazy_lru_and_takes_the_end_of_a_sequence_before_its_beginning() -> None:
    m = cached_manager(6)
    old, _ = admit(m, "old", list(range(300, 312)))            # 3 full blocks: 0, 1, 2
    new, _ = admit(m, "new", list(range(400, 408)))            # 2 full blocks: 3, 4
    m.release(old)
    m.release(new)
    assert m.pool.free_ids() == [5, 2, 1, 0, 4, 3]
    assert m.admit(Request("x", None, num_prompt_tokens=8), 8) == [5, 2]   # never cached, then old's last block
    assert m.prefix_cache.num_evictions == 1 and 2 not in m.prefix_cache
    assert cached_blocks(m, list(range(300, 312)) + [0]) == (0, 1)         # old's prefix is still there
    assert m.admit(Request("y", None, num_prompt_tokens=8), 8) == [1, 0]   # the rest of old, least recently used
    assert cached_blocks(m, list(range(300, 312)) + [0]) == ()
    assert cached_blocks(m, list(range(400, 408)) + [0]) == (3, 4)         # newer blocks survive
    assert m.prefix_cache.num_evictions == 3


def test_a_hash_collision_is_caught_by_comparing_tokens() -> None:
    m = cached_manager(hash_fn=lambda parent, tokens: b"same hash for everything")
    a, _ = admit(m, "a", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    b, hit_b = admit(m, "b", [9, 9, 9, 9, 5, 6, 7, 8, 9])
    assert hit_b == 0                                          # same hash, other tokens: a miss, not a wrong hit
    assert admit(m, "c", [1, 2, 3, 4, 9, 9, 9, 9, 9])[1] == 4  # block 0 is really equal; block 1's parent differs
    assert admit(m, "d", [1, 2, 3, 4, 5, 6, 7, 8, 0])[1] == 4  # block 1 collides with block 0's entry: refused
    assert m.block_ids(b)[0] != m.block_ids(a)[0]


def first_token_hash(parent: bytes, tokens: Sequence[int]) -> bytes:
    """A colliding hash: it ignores the parent, and blocks that start alike collide."""
    return bytes([tokens[0] % 10])


def test_a_block_is_never_found_under_another_prefix_whose_hash_collides_with_its_parent() -> None:
    """The collision check compares the parent: a parent hash alone can be a collision too.

    Q collides with P's hash, which is taken, so b's Q is not cached; b's Y, computed after Q,
    must not be found after P either.
    """
    m = cached_manager(hash_fn=first_token_hash)
    admit(m, "a", [1, 2, 3, 4, 0])                              # P = (1..4) cached
    b, hit_b = admit(m, "b", [11, 12, 13, 14, 5, 6, 7, 8, 0])   # Q collides with P: a miss; Y computed after Q
    assert hit_b == 0
    y_block = m.block_ids(b)[1]
    c, hit_c = admit(m, "c", [1, 2, 3, 4, 5, 6, 7, 8, 0])      # P is found, b's Y (computed after Q) is not
    assert hit_c == 4 and y_block not in m.block_ids(c)


def test_a_child_is_not_found_after_its_parent_is_evicted_and_a_colliding_block_takes_its_hash() -> None:
    """P leaves the cache (evicted) while a block cached after it stays; Q, colliding with P, takes P's hash."""
    m = cached_manager(6, hash_fn=first_token_hash)
    t, _ = admit(m, "t", [1, 2, 3, 4, 0])                      # block 0 = P, cached
    s, _ = admit(m, "s", [1, 2, 3, 4])                         # the hit is capped: s's own block 2 repeats P
    for token in (5, 6, 7, 8):                                 # s decodes Y = (5..8) into block 3
        s.output_token_ids.append(token)
        assert m.grow(s, 1) is not None
        s.num_computed_tokens += 1
    m.release(t)
    x = Request("x", None, num_prompt_tokens=16)
    assert m.admit(x, 16) == [1, 4, 5, 0]                      # P is evicted; s still holds its Y
    m.release(x)
    u, _ = admit(m, "u", [11, 12, 13, 14, 5, 6, 7, 8, 0])      # Q is cached under P's old hash, then u's own Y
    v, hit_v = admit(m, "v", [11, 12, 13, 14, 5, 6, 7, 8, 0])
    assert hit_v == 8 and m.block_ids(v)[:2] == m.block_ids(u)[:2]   # u's Q and Y, not s's Y (computed after P)


@settings(max_examples=80, deadline=None)
@given(prompts=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=14), min_size=1, max_size=8),
       releases=st.lists(st.integers(0, 7), max_size=4))
def test_with_any_colliding_hash_every_hit_holds_exactly_the_prompt_prefix(prompts: list[list[int]],
                                                                           releases: list[int]) -> None:
    """Property: whatever collides, a block found for a prompt was computed after exactly that prefix.

    Blocks leave the cache only by eviction: sequences are released (some at random) and the
    small pool hands their blocks out again.
    """
    m = BlockManager(16, 2, enable_prefix_caching=True, hash_fn=first_token_hash)
    written: dict[int, tuple[int, ...]] = {}        # block -> the whole prefix its K/V were computed after
    live: list[Request] = []
    for i, tokens in enumerate(prompts):
        for index in releases[i:i + 1]:
            if live:
                m.release(live.pop(index % len(live)))
        seq = Request(i, tokens)
        hit = m.lookup(seq)
        for j, block_id in enumerate(hit.block_ids):
            assert written[block_id] == tuple(tokens[:(j + 1) * 2])
        if m.admit(seq, len(tokens) - hit.num_tokens, hit) is None:
            break
        seq.num_computed_tokens = len(tokens)
        live.append(seq)
        ids = m.block_ids(seq)
        for j, block_id in enumerate(ids[len(hit.block_ids):len(tokens) // 2], len(hit.block_ids)):
            written[block_id] = tuple(tokens[:(j + 1) * 2])
        if i % 3 == 2 and len(live) > 1:
            m.release(live.pop(-2))


def test_same_step_sharing_and_release_in_either_order() -> None:
    """Blocks are findable from admission (vLLM v1), so a request admitted in the same step shares them.

    The scheduler grows before it admits, so no sequence is released before its forward
    pass: releasing the sharers in either order leaves the written blocks findable.
    """
    m = cached_manager()
    a = Request("a", SYSTEM + [1, 2, 3])
    assert m.admit(a, 13, m.lookup(a)) is not None             # admitted, not computed yet: its count is still 0
    b = Request("b", SYSTEM + [4, 5, 6])
    hit = m.lookup(b)
    assert hit.num_tokens == 8                                 # same step: shares a's blocks
    m.admit(b, 13 - hit.num_tokens, hit)
    assert m.ref_count_of(b) == [2, 2, 1, 1]
    m.release(a)                                               # oldest first is allowed too
    assert m.ref_count_of(b) == [1, 1, 1, 1]
    m.release(b)
    assert m.pool.num_free == m.pool.num_blocks
    assert admit(m, "c", SYSTEM + [1, 2, 3])[1] == 12          # a's three full blocks stay findable


def test_admission_counts_only_the_blocks_a_request_takes() -> None:
    m = cached_manager(5)
    admit(m, "a", SYSTEM + [1, 2])                             # 3 blocks held, 2 free
    prompt = SYSTEM + [7, 8, 9, 10, 11]                        # 15 tokens = 4 blocks, 2 of them cached and in use
    before = cache_state(m)
    assert m.admit(Request("b", None, num_prompt_tokens=15), 15) is None   # without the hit: 4 blocks, 2 free
    assert cache_state(m) == before
    b, hit_b = admit(m, "b", prompt)
    assert hit_b == 8
    assert m.pool.num_free == 0
    before = cache_state(m)
    c = Request("c", SYSTEM + [3, 3, 3])
    hit = m.lookup(c)
    assert hit.num_tokens == 8 and m.admit(c, 13 - 8, hit) is None   # needs two new blocks; none is free
    assert c not in m and cache_state(m) == before


def test_bad_calls_are_refused() -> None:
    m = cached_manager()
    with pytest.raises(ValueError, match=r"sequence 'a' has 3 tokens; 0 \+ 4 would be tokens it does not have"):
        m.admit(Request("a", [1, 2, 3]), 4)
    with pytest.raises(ValueError, match="one pool, one cache"):
        PrefixCache(m.pool)                                    # a pool has one prefix cache
    a, _ = admit(m, "a", [1, 2, 3, 4])
    other = BlockManager(16, B, enable_prefix_caching=True, hash_fn=first_token_hash)
    with pytest.raises(ValueError, match="give it a fresh record"):
        other.lookup(a)                                        # hashed by one cache, it cannot be read by another
    with pytest.raises(KeyError, match="holds blocks already"):
        m.fork(a, a)
    assert m.ref_count_of(a) == [1]


def test_the_workload_hit_rates_follow_the_shared_prefix() -> None:
    requests = copilot50(0, 12, length_scale=1 / 8)            # a 25-token system prompt
    plain = simulate(requests, "paged", 4096, block_size=4)
    cached = simulate(requests, "paged", 4096, block_size=4, enable_prefix_caching=True)
    shots = simulate(few_shot_variant(requests, length_scale=1 / 8), "paged", 4096, block_size=4,
                     max_seq_len=few_shot_max_seq_len(length_scale=1 / 8), enable_prefix_caching=True)
    assert plain.preemptions == cached.preemptions == 0        # so every prefill is a first admission
    assert plain.tokens.prefix_hit_tokens == 0
    assert plain.tokens.prefill_tokens == plain.tokens.prompt_tokens == sum(r.prompt_len for r in requests)
    assert cached.tokens.prefix_hit_tokens == 11 * 24          # every request but the first: 6 full blocks
    assert cached.tokens.prefill_tokens == cached.tokens.prompt_tokens - cached.tokens.prefix_hit_tokens
    assert shots.prefix_hit_rate > 2 * cached.prefix_hit_rate
    assert "prefix_caching" in cached.summary() and "prefix_caching" not in plain.summary()
    with pytest.raises(ValueError, match="needs policy='paged', not 'contiguous'"):
        simulate(requests, "contiguous", 4096, enable_prefix_caching=True)


def test_a_preempted_request_finds_its_own_blocks_apart_from_shared_hits() -> None:
    requests = copilot50(0, 50)                                # full size, a tight budget: preemptions happen
    run = simulate(requests, "paged", 10 * 2048, block_size=16, enable_prefix_caching=True)
    assert run.preemptions > 0 and run.tokens.resumed_hit_tokens > 0
    assert run.tokens.prompt_tokens == sum(r.prompt_len for r in requests)
    assert run.tokens.prefix_hit_tokens == 49 * 192            # sharing: the system prompt's 12 full blocks
    plain = simulate(requests, "paged", 10 * 2048, block_size=16)
    assert plain.tokens.resumed_hit_tokens == plain.tokens.prefix_hit_tokens == 0
    assert plain.tokens.prefill_tokens > plain.tokens.prompt_tokens
