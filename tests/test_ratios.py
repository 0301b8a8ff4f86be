"""The hit rate and the utilisation are defined once: every report calls the one definition."""

from __future__ import annotations

import pytest

from pagedkv_edu import specs
from pagedkv_edu.core.block_manager import BlockManager, MemoryUsage
from pagedkv_edu.core.scheduler import TokenCounts
from pagedkv_edu.engine.outputs import EngineStats


def test_the_two_ratios_and_their_empty_cases() -> None:
    assert specs.hit_rate(3, 12) == 0.25 and specs.hit_rate(0, 0) == 0.0      # nothing looked up: no hits
    assert specs.utilisation(9, 12) == 0.75 and specs.utilisation(0, 0) == 1.0  # nothing held: nothing wasted


def test_every_report_agrees_with_the_definition() -> None:
    counts = TokenCounts(prompt_tokens=40, prefix_hit_tokens=12)
    stats = EngineStats(step=1, kv_usage=0.5, num_running=2, num_waiting=0, num_preemptions=0, generated_tokens=4,
                        elapsed=1.0, kv_tokens=27, kv_held_slots=32,
                        tokens=TokenCounts(prompt_tokens=40, prefix_hit_tokens=12))
    assert counts.prefix_hit_rate == stats.prefix_hit_rate == specs.hit_rate(12, 40) == pytest.approx(0.3)
    assert MemoryUsage(27, 32, 64).utilisation == stats.kv_utilisation == specs.utilisation(27, 32)


def test_the_caches_lookup_rate_counts_every_lookup() -> None:
    """A returning (preempted) request's lookups count in the cache's own rate, not in the prefix hit rate."""
    cache = BlockManager(8, 4, enable_prefix_caching=True).prefix_cache
    cache.record(8, 4)
    cache.record(8, 8)    # the same request back after a preemption finds all of it
    assert cache.lookup_hit_rate == specs.hit_rate(12, 16) == 0.75
    assert "lookup hit rate 75.0%" in repr(cache)
