"""serve-bench on arrivals: seeded Poisson schedules, and every path serving every request once (no timings)."""

from __future__ import annotations

import pytest

from pagedkv_edu.bench.arrivals import arrival_times, compare
from pagedkv_edu.bench.serve import make_setup
from pagedkv_edu.model.loading import load_model


def test_arrivals_are_seeded_increasing_and_start_at_zero() -> None:
    times = arrival_times(20, 5.0, seed=3)
    assert times[0] == 0.0 and times == sorted(times) and len(set(times)) == 20
    assert times == arrival_times(20, 5.0, seed=3) and times != arrival_times(20, 5.0, seed=4)
    assert 1.0 < times[-1] < 10.0     # 19 gaps of mean 0.2 s
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="arrival rate"):
            arrival_times(3, bad)


def test_the_engine_and_static_generate_serve_every_arrival_with_the_same_tokens() -> None:
    tiny = load_model("tiny-random")
    setup = make_setup(tiny, num_requests=3, length_scale=1 / 64, output_scale=0.02, block_size=4)
    result = compare(tiny, setup, rate_per_s=50.0, continuous_peer=False)   # transformers, not ours: ~10 s of warm-up
    useful = sum(r.output_len for r in setup.requests)
    assert result["engine"]["generated_tokens"] == useful
    assert result["peers"][0]["generated_tokens"] == useful
    assert result["vs_transformers_static"]["same_tokens"] is True
    assert len(result["arrivals_s"]) == 3 and all("token_ids" not in r for r in [result["engine"], *result["peers"]])
