"""Decoding with and without a KV cache (chapter 0): exact counts of positions processed, the same tokens."""

from __future__ import annotations

import pytest

from pagedkv_edu.bench.no_cache import attention_pairs, greedy_decode, positions_processed, step_seconds
from pagedkv_edu.model.loading import load_model


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random", device="cpu")


def test_positions_processed_is_quadratic_without_a_cache_and_linear_with_one() -> None:
    assert positions_processed(5, 24, True) == 28
    assert positions_processed(5, 24, False) == sum(range(5, 29)) == 396
    assert positions_processed(1, 1, False) == positions_processed(1, 1, True) == 1
    with pytest.raises(ValueError, match="new_tokens=0"):
        positions_processed(5, 0, True)


def test_greedy_decode_counts_what_the_model_embeds_and_gives_the_same_tokens(tiny) -> None:
    runs = {use: greedy_decode(tiny.hf_model, [1, 2, 3], 6, use_cache=use) for use in (False, True)}
    assert runs[False].processed == [3, 4, 5, 6, 7, 8] and runs[True].processed == [3, 1, 1, 1, 1, 1]
    assert sum(runs[False].processed) == positions_processed(3, 6, False)
    assert runs[False].tokens == runs[True].tokens and len(runs[True].tokens) == 6
    with pytest.raises(ValueError, match="new_tokens"):
        greedy_decode(tiny.hf_model, [], 3, use_cache=True)


def test_step_seconds_times_both_ways_at_every_length(tiny) -> None:
    times = step_seconds(tiny.hf_model, (4, 16), repeats=1)
    assert set(times) == {"without cache", "with cache"}
    assert all(list(t) == [4, 16] and min(t.values()) > 0 for t in times.values())
    with pytest.raises(ValueError, match="context lengths"):
        step_seconds(tiny.hf_model, (1,))


def test_attention_pairs_are_cubic_in_total_without_a_cache_and_quadratic_with_one(tiny) -> None:
    runs = {use: greedy_decode(tiny.hf_model, [1, 2, 3], 6, use_cache=use) for use in (False, True)}
    without, cached = (attention_pairs(runs[use].processed, 3) for use in (False, True))
    assert without == [L * (L + 1) // 2 for L in range(3, 9)]          # every step recomputes the causal square
    assert cached == [6, 4, 5, 6, 7, 8]                                 # the prefill's 3 x 4 / 2, then one query per step
    assert cached[-1] > cached[1]                                       # a cached step's attention still grows
    assert attention_pairs([256], 256) == [256 * 257 // 2] and attention_pairs([1], 256) == [256]
    with pytest.raises(ValueError, match="ran 5 positions of a 4-token sequence"):
        attention_pairs([5], 4)
    with pytest.raises(ValueError, match="start_len"):
        attention_pairs([1], 0)
