"""Automatic prefix caching in the block manager: hits, the num_tokens - 1 cap, lazy LRU eviction, collisions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_pool import BlockPool, OutOfBlocksError
from pagedkv_edu.core.prefix_cache import ROOT_HASH, PrefixCache, hash_block
from pagedkv_edu.sim.sharing import few_shot_max_seq_len, few_shot_variant
from pagedkv_edu.sim.simulate import simulate
from pagedkv_edu.workload import copilot50

B = 4


def cached_manager(num_blocks: int = 16) -> BlockManager:
    return BlockManager(num_blocks, B, enable_prefix_caching=True)


def admit(m: BlockManager, seq_id: object, tokens: list[int]) -> int:
    """Add a sequence, pretend its prefill ran, return the tokens it found cached."""
    hit = m.admit(seq_id, len(tokens), tokens)
    m.mark_computed(seq_id, tokens)
    return hit


SYSTEM = list(range(100, 110))           # 10 tokens: two full blocks of 4 and half a block


def test_the_hash_is_a_chain_and_stable() -> None:
    first = hash_block(ROOT_HASH, [1, 2, 3, 4])
    assert first == hash_block(ROOT_HASH, (1, 2, 3, 4)) and len(first) == 32     # list or tuple: same bytes
    assert hash_block(first, [5, 6, 7, 8]) != hash_block(ROOT_HASH, [5, 6, 7, 8])  # the parent is part of it
    assert hash_block(ROOT_HASH, [1, 2, 3, 4]) != hash_block(ROOT_HASH, [4, 3, 2, 1])
    cache = PrefixCache(BlockPool(4, 4))
    assert cache.chain([1, 2, 3, 4, 5, 6, 7, 8, 9]) == [first, hash_block(first, [5, 6, 7, 8])]


def test_a_second_request_reuses_the_shared_full_blocks_and_computes_the_rest() -> None:
    m = cached_manager()
    assert admit(m, "a", SYSTEM + [1, 2, 3]) == 0
    assert admit(m, "b", SYSTEM + [7, 8, 9, 10, 11]) == 8                 # two full blocks; the half block is not shared
    a, b = m.table("a"), m.table("b")
    assert b.block_ids[:2] == a.block_ids[:2] and b.block_ids[2] != a.block_ids[2]
    assert m.ref_count_of("b") == [2, 2, 1, 1]
    assert m.prefix_cache.lookup_hit_rate == pytest.approx(8 / (13 + 15))
    m.release("a")
    m.release("b")
    assert m.pool.num_free == m.pool.num_blocks


def test_a_prefix_shorter_than_one_block_never_hits() -> None:
    """vLLM #54607: only full blocks are cached, so a 3-token shared prefix at block size 4 gives 0 hits."""
    m = cached_manager()
    admit(m, "a", [1, 2, 3] + [10, 11, 12, 13, 14])
    assert admit(m, "b", [1, 2, 3] + [20, 21, 22, 23, 24]) == 0
    requests = copilot50(0, 8, length_scale=1 / 16)          # a 12-token system prompt
    assert simulate(requests, "paged", 2048, block_size=16, enable_prefix_caching=True).hit_tokens == 0
    assert simulate(requests, "paged", 2048, block_size=4, enable_prefix_caching=True).hit_tokens == 7 * 12


def test_a_full_prompt_hit_on_a_block_multiple_still_computes_the_last_block() -> None:
    """nano-vllm #144: the hit is capped at num_tokens - 1, so a prompt of whole cached blocks recomputes one."""
    m = cached_manager()
    prompt = list(range(200, 208))                             # exactly two blocks
    admit(m, "a", prompt)
    assert admit(m, "b", prompt) == 4                          # not 8: the last token must run for logits
    assert m.table("b").block_ids[0] == m.table("a").block_ids[0]
    assert m.table("b").block_ids[1] != m.table("a").block_ids[1]
    assert admit(m, "c", prompt + [1]) == 8                    # one more token: both blocks hit


def test_freed_blocks_stay_findable_until_reused_and_a_hit_takes_them_out_of_the_free_queue() -> None:
    m = cached_manager(8)
    admit(m, "a", SYSTEM + [1, 2])                             # blocks 0, 1, 2
    m.release("a")
    assert m.pool.free_ids() == [3, 4, 5, 6, 7, 2, 1, 0]       # tail first: block 2 before the shared beginning
    assert m.prefix_cache.cached_free_blocks() == [2, 1, 0]
    # 9 free blocks are not needed: the two cached ones come back out of the middle of the queue.
    assert m.blocks_to_admit(13, SYSTEM + [5, 6, 7]) == 2 + 2 - 2 + 2
    assert admit(m, "b", SYSTEM + [5, 6, 7]) == 8
    assert m.table("b").block_ids[:2] == [0, 1] and m.pool.free_ids() == [5, 6, 7, 2]
    assert m.prefix_cache.num_evictions == 0


def test_eviction_is_lazy_lru_and_takes_the_end_of_a_sequence_before_its_beginning() -> None:
    m = cached_manager(6)
    admit(m, "old", list(range(300, 312)))                     # 3 full blocks: 0, 1, 2
    admit(m, "new", list(range(400, 408)))                     # 2 full blocks: 3, 4
    m.release("old")
    m.release("new")
    assert m.pool.free_ids() == [5, 2, 1, 0, 4, 3]
    m.admit("x", 8)                                     # takes 5 (never cached) and 2: old's last block
    assert m.prefix_cache.num_evictions == 1 and 2 not in m.prefix_cache
    assert m.prefix_cache.lookup(list(range(300, 312)) + [0]).block_ids == (0, 1)   # old's prefix is still there
    m.admit("y", 8)                                     # 1 and 0: the rest of old, least recently used
    assert m.prefix_cache.lookup(list(range(300, 312)) + [0]).block_ids == ()
    assert m.prefix_cache.lookup(list(range(400, 408)) + [0]).block_ids == (3, 4)   # newer blocks survive
    assert m.prefix_cache.num_evictions == 3


def test_a_hash_collision_is_caught_by_comparing_tokens() -> None:
    m = BlockManager(16, B)
    m.enable_prefix_caching(hash_fn=lambda parent, tokens: b"same hash for everything")
    admit(m, "a", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert admit(m, "b", [9, 9, 9, 9, 5, 6, 7, 8, 9]) == 0    # same hash, other tokens: a miss, not a wrong hit
    assert admit(m, "c", [1, 2, 3, 4, 9, 9, 9, 9, 9]) == 4    # block 0 is really equal; block 1's parent differs
    assert admit(m, "d", [1, 2, 3, 4, 5, 6, 7, 8, 0]) == 4    # block 1 collides with block 0's entry: refused
    assert m.table("b").block_ids[0] != m.table("a").block_ids[0]


def first_token_hash(parent: bytes, tokens) -> bytes:
    """A colliding hash: it ignores the parent, and blocks that start alike collide."""
    return bytes([tokens[0] % 10])


def test_a_block_is_never_found_under_another_prefix_whose_hash_collides_with_its_parent() -> None:
    """The collision check compares the parent block: a parent hash alone can be a collision too."""
    m = BlockManager(16, B)
    m.enable_prefix_caching(hash_fn=first_token_hash)
    admit(m, "a", [1, 2, 3, 4, 5, 6, 7, 8, 0])                 # blocks P=(1..4), Y=(5..8) cached
    p_block, y_block = m.table("a").block_ids[:2]
    m.prefix_cache.discard(p_block)                            # P leaves the cache; Y stays findable
    admit(m, "b", [11, 12, 13, 14, 5, 6, 7, 8, 0])             # Q collides with P's hash, is cached in its place
    hit = m.prefix_cache.lookup([11, 12, 13, 14, 5, 6, 7, 8, 0])
    assert hit.block_ids == (m.table("b").block_ids[0],)        # Q is found, Y (computed after P) is not
    assert y_block not in hit.block_ids
    assert admit(m, "c", [11, 12, 13, 14, 5, 6, 7, 8, 0]) == 4


@settings(max_examples=80, deadline=None)
@given(prompts=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=14), min_size=1, max_size=8),
       discards=st.lists(st.integers(0, 15), max_size=4))
def test_with_any_colliding_hash_every_hit_holds_exactly_the_prompt_prefix(prompts, discards) -> None:
    """Property: whatever collides, a block found for a prompt was computed after exactly that prefix."""
    m = BlockManager(16, 2)
    m.enable_prefix_caching(hash_fn=first_token_hash)
    written: dict[int, tuple[int, ...]] = {}        # block -> the whole prefix its K/V were computed after
    for i, tokens in enumerate(prompts):
        for block_id in discards[i:i + 1]:
            m.prefix_cache.discard(block_id)
        if not m.can_admit(i, len(tokens), tokens):
            break
        hit = m.prefix_cache.lookup(tokens)
        for j, block_id in enumerate(hit.block_ids):
            assert written[block_id] == tuple(tokens[:(j + 1) * 2])
        m.admit(i, len(tokens), tokens)
        m.mark_computed(i, tokens)
        table = m.table(i)
        for j, block_id in enumerate(table.block_ids[len(hit.block_ids):len(tokens) // 2], len(hit.block_ids)):
            written[block_id] = tuple(tokens[:(j + 1) * 2])
        if i % 3 == 2:
            m.release(i - 1)


def test_same_step_sharing_and_release_in_either_order() -> None:
    """Blocks are findable from admission (vLLM v1), so a request admitted in the same step shares them.

    The scheduler grows before it admits, so no sequence is released before its forward
    pass: releasing the sharers in either order leaves the written blocks findable.
    """
    m = cached_manager()
    m.admit("a", 13, SYSTEM + [1, 2, 3])                # admitted, not computed yet
    assert m.admit("b", 13, SYSTEM + [4, 5, 6]) == 8           # same step: shares a's blocks
    assert m.ref_count_of("b") == [2, 2, 1, 1]
    m.release("a")                                              # oldest first is allowed too
    assert m.ref_count_of("b") == [1, 1, 1, 1]
    m.release("b")
    assert m.pool.num_free == m.pool.num_blocks
    assert admit(m, "c", SYSTEM + [1, 2, 3]) == 12             # a's three full blocks stay findable


def test_admission_counts_only_the_blocks_a_request_takes() -> None:
    m = cached_manager(5)
    admit(m, "a", SYSTEM + [1, 2])                             # 3 blocks held, 2 free
    memory = m
    prompt = SYSTEM + [7, 8, 9, 10, 11]                        # 15 tokens = 4 blocks, 2 of them cached and in use
    assert memory.can_admit("b", 15, prompt) and not memory.can_admit("b", 15)
    assert memory.admit("b", 15, prompt) == 8
    assert m.pool.num_free == 0
    with pytest.raises(OutOfBlocksError):
        m.admit("c", 13, SYSTEM + [3, 3, 3])            # needs one new block; none is free
    assert "c" not in m.tables


def test_bad_calls_are_refused() -> None:
    m = cached_manager()
    with pytest.raises(ValueError, match="3 token ids given for a sequence of 4 tokens"):
        m.admit("a", 4, [1, 2, 3])
    with pytest.raises(ValueError, match="already on"):
        m.enable_prefix_caching()
    m.admit("a", 4, [1, 2, 3, 4])
    with pytest.raises(ValueError, match="before admitting sequences"):
        BlockManager.enable_prefix_caching(m)
    with pytest.raises(ValueError, match="holds 4 tokens but 2 token ids"):
        m.mark_computed("a", [1, 2])
    with pytest.raises(KeyError, match="already live"):
        m.fork("a", "a")
    assert m.ref_count_of("a") == [1]


def test_the_workload_hit_rates_follow_the_shared_prefix() -> None:
    requests = copilot50(0, 12, length_scale=1 / 8)            # a 25-token system prompt
    plain = simulate(requests, "paged", 4096, block_size=4)
    cached = simulate(requests, "paged", 4096, block_size=4, enable_prefix_caching=True)
    shots = simulate(few_shot_variant(requests, length_scale=1 / 8), "paged", 4096, block_size=4,
                     max_seq_len=few_shot_max_seq_len(length_scale=1 / 8), enable_prefix_caching=True)
    assert plain.preemptions == cached.preemptions == 0        # so every prefill is a first admission
    assert plain.hit_tokens == 0 and plain.prefill_tokens == plain.prompt_tokens == sum(r.prompt_len for r in requests)
    assert cached.hit_tokens == 11 * 24                        # every request but the first: 6 full blocks
    assert cached.prefill_tokens == cached.prompt_tokens - cached.hit_tokens
    assert shots.prefix_hit_rate > 2 * cached.prefix_hit_rate
    assert "prefix_caching" in cached.summary() and "prefix_caching" not in plain.summary()
    with pytest.raises(ValueError, match="needs policy='paged', not 'contiguous'"):
        simulate(requests, "contiguous", 4096, enable_prefix_caching=True)


def test_a_preempted_request_finds_its_own_blocks_apart_from_shared_hits() -> None:
    requests = copilot50(0, 50)                                # full size, a tight budget: preemptions happen
    run = simulate(requests, "paged", 10 * 2048, block_size=16, enable_prefix_caching=True)
    assert run.preemptions > 0 and run.resumed_hit_tokens > 0
    assert run.prompt_tokens == sum(r.prompt_len for r in requests)
    assert run.hit_tokens == 49 * 192                          # sharing: the system prompt's 12 full blocks
    plain = simulate(requests, "paged", 10 * 2048, block_size=16)
    assert plain.resumed_hit_tokens == plain.hit_tokens == 0 and plain.prefill_tokens > plain.prompt_tokens
