"""The radix cache against a brute-force oracle: random inserts, locks, unlocks and evictions (hypothesis)."""

from __future__ import annotations

import re

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pagedkv_edu.sim.radix_cache import RadixCache
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

TOKENS = st.lists(st.integers(0, 2), max_size=10)   # a tiny vocabulary: prompts share and diverge often


def cached_prefixes(cache: RadixCache) -> set[tuple[int, ...]]:
    """Every cached prefix, one per cached token (the oracle's view of the tree)."""
    out = set()
    for node in cache.nodes():
        start = node.prefix()
        out |= {start[:len(start) - k] for k in range(len(node.key))}
    return out


def test_a_partial_match_splits_the_edge() -> None:
    cache = RadixCache(100)
    assert cache.insert([1, 2, 3, 4]) == 0
    assert cache.num_nodes == 1
    matched, node = cache.match_prefix([1, 2, 9])
    assert matched == 2 and node.key == (1, 2) and cache.num_nodes == 2 and cache.num_tokens == 4
    assert cache.insert([1, 2, 9, 9]) == 2 and cache.num_nodes == 3
    assert sorted(n.prefix() for n in cache.nodes() if not n.children) == [(1, 2, 3, 4), (1, 2, 9, 9)]


def test_eviction_takes_the_least_recently_used_unlocked_leaf_and_respects_locks() -> None:
    cache = RadixCache(9)
    for tokens in ([1, 1, 1], [2, 2, 2], [3, 3, 3]):
        cache.insert(tokens)
    _, node = cache.match_prefix([1, 1, 1])      # the oldest, but locked by a running request
    cache.lock(node)
    cache.match_prefix([3, 3, 3])                # used again: now the most recent
    cache.insert([4, 4, 4])                      # 12 > 9 tokens: the least recently used unlocked leaf goes
    assert [cache.match_prefix(t * 3)[0] for t in ([1], [2], [3], [4])] == [3, 0, 3, 3]
    assert cache.num_evicted_tokens == 3 and cache.evictable_tokens == 6
    cache.unlock(node)
    with pytest.raises(ValueError, match="not locked"):
        cache.unlock(node)


def test_a_full_tree_of_locked_prefixes_caches_what_fits() -> None:
    cache = RadixCache(4)
    cache.insert([5, 6, 7])
    cache.lock(cache.match_prefix([5, 6, 7])[1])
    assert cache.insert([8, 8, 8]) == 0 and cache.num_tokens == 4 and cache.match_prefix([8, 8])[0] == 1


@pytest.mark.parametrize("bad", [0, -3, 2.5])
def test_bad_capacity_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="capacity_tokens"):
        RadixCache(bad)


class RadixMachine(RuleBasedStateMachine):
    @initialize(capacity=st.integers(1, 24))
    def build(self, capacity: int) -> None:
        self.cache = RadixCache(capacity)
        self.locked: list[tuple[tuple[int, ...], object]] = []   # (prefix, node) held by "running requests"

    @rule(tokens=TOKENS)
    def insert(self, tokens: list[int]) -> None:
        before = cached_prefixes(self.cache)
        expect_hit = max((k for k in range(len(tokens) + 1) if tuple(tokens[:k]) in before or k == 0))
        assert self.cache.insert(tokens) == expect_hit
        after = cached_prefixes(self.cache)
        locked = {p[:k] for p, _ in self.locked for k in range(1, len(p) + 1)}
        assert locked <= after                                        # a locked path is never evicted
        stored = max(k for k in range(len(tokens) + 1) if tuple(tokens[:k]) in after or k == 0)
        assert stored == len(tokens) or self.cache.num_tokens == self.cache.capacity_tokens \
            or self.cache.evictable_tokens == 0 or stored >= expect_hit

    @rule(tokens=TOKENS)
    def match(self, tokens: list[int]) -> None:
        present = cached_prefixes(self.cache)
        expected = max(k for k in range(len(tokens) + 1) if k == 0 or tuple(tokens[:k]) in present)
        matched, node = self.cache.match_prefix(tokens)
        assert matched == expected and node.prefix() == tuple(tokens[:matched])
        assert cached_prefixes(self.cache) == present                   # a split changes no content

    @rule(tokens=TOKENS)
    def lock(self, tokens: list[int]) -> None:
        matched, node = self.cache.match_prefix(tokens)
        self.cache.lock(node)
        self.locked.append((tuple(tokens[:matched]), node))

    @precondition(lambda self: self.locked)
    @rule(data=st.data())
    def unlock(self, data: st.DataObject) -> None:
        _, node = self.locked.pop(data.draw(st.integers(0, len(self.locked) - 1)))
        self.cache.unlock(node)

    @rule(n=st.integers(0, 12))
    def evict(self, n: int) -> None:
        before = cached_prefixes(self.cache)
        evicted = self.cache.evict(n)
        after = cached_prefixes(self.cache)
        assert after <= before and len(before) - len(after) == evicted
        assert evicted >= min(n, evicted) and (evicted >= n or self.cache.evictable_tokens == 0)

    @invariant()
    def consistent(self) -> None:
        present = cached_prefixes(self.cache)
        assert len(present) == self.cache.num_tokens <= self.cache.capacity_tokens    # one prefix per token
        assert all(p[:-1] in present or len(p) == 1 for p in present)                 # closed under prefixes
        for node in self.cache.nodes():
            assert node.key and node.parent.children[node.key[0]] is node
            assert node.lock_ref >= sum(c.lock_ref for c in node.children.values())
        locked = {p[:k] for p, _ in self.locked for k in range(1, len(p) + 1)}
        assert locked <= present


TestRadixMachine = RadixMachine.TestCase
TestRadixMachine.settings = settings(max_examples=80, stateful_step_count=30, deadline=None)


def test_the_picture_is_a_pure_deterministic_function_of_the_tree() -> None:
    from pagedkv_edu.viz.radix_view import RadixPicture, radix_view, render_radix_svg

    cache = RadixCache(50)
    cache.insert([1, 2, 3, 4])
    first = radix_view(cache, "one prompt")
    cache.insert([1, 2, 9])
    cache.lock(cache.match_prefix([1, 2, 9])[1])
    second = radix_view(cache, "two prompts")
    assert [(n.label, n.num_tokens, n.locked, n.parent) for n in second.nodes] == \
        [("1 2", 2, True, None), ("3 4", 2, False, 0), ("9", 1, True, 0)]
    assert len(first.nodes) == 1                         # a view is a copy: the later split does not change it
    svg = render_radix_svg([first, second])
    assert svg == render_radix_svg([first, second]) and svg.startswith("<svg") and "<defs" not in svg
    assert "two prompts" in svg and "5 of 50 tokens, 3 nodes" in svg
    assert "image/svg+xml" in RadixPicture([first])._repr_mimebundle_()
    with pytest.raises(ValueError, match="no tree"):
        render_radix_svg([])


def test_the_radix_tree_finds_at_least_what_the_hash_chain_finds_and_the_same_at_block_size_1() -> None:
    from pagedkv_edu.sim.radix_compare import compare_by_block_size, hit_rate_by_free_order, second_turns
    from pagedkv_edu.workload import copilot50, prompt_token_ids

    prompts = [prompt_token_ids(r, 500) for r in copilot50(seed=1, num_requests=12, length_scale=1 / 8)]
    turns = prompts + second_turns(prompts, 6, 3, vocab=(100, 500))
    for b, chain, radix in compare_by_block_size(turns, [1, 3, 16], 4000, 4):   # ample room: nothing evicted
        assert chain.evicted == radix.evicted == 0
        assert (chain.hit_tokens == radix.hit_tokens) if b == 1 else (chain.hit_tokens <= radix.hit_tokens)
    assert compare_by_block_size(turns, [16], 4000, 4)[0][1].hit_tokens < radix.hit_tokens
    orders = hit_rate_by_free_order(turns, 4, 1000, 4)     # under pressure: the second turns lose blocks
    assert orders["vllm-v1"].hit_tokens > orders["append"].hit_tokens
    with pytest.raises(ValueError, match="does not fit capacity_tokens=10"):
        compare_by_block_size(turns, [4], 10, 4)


def test_set_free_order_needs_a_prefix_cache_and_a_known_order() -> None:
    from pagedkv_edu.core.block_manager import BlockManager
    from pagedkv_edu.sim.radix_compare import set_free_order

    with pytest.raises(ValueError, match="only with prefix caching on"):
        set_free_order(BlockManager(4, 4), "append")
    manager = BlockManager(4, 4, enable_prefix_caching=True)
    with pytest.raises(ValueError, match="got 'lifo'"):
        set_free_order(manager, "lifo")
    set_free_order(manager, "append")
    assert manager.pool.free_order == "append" and manager.pool.is_cached is not None


def test_the_picture_speaks_zh_tw(zh_tw) -> None:
    from html import unescape

    from pagedkv_edu.viz.radix_view import RadixPicture, radix_view, render_radix_svg

    cache = RadixCache(50)
    cache.insert([1, 2, 3, 4])
    cache.insert([1, 2, 9])
    cache.lock(cache.match_prefix([1, 2, 9])[1])
    view = radix_view(cache, "兩個提示詞")
    svg = render_radix_svg([view])
    texts = [unescape("".join(g)) for g in
             re.findall(r"<text[^>]*>([^<]*)</text>|<title>([^<]*)</title>|aria-label=\"([^\"]*)\"", svg)]
    assert untranslated("\n".join(texts)) == [] and "基數樹" in texts and "5/50 個 token，3 個節點" in texts
    assert "2 個 token · 使用中" in texts and "1 2（2 個 token）" in texts
    assert repr(RadixPicture([view])) == "兩個提示詞：3 個節點，5 個 token"
