"""serve-bench's time breakdown per step kind and its decode-step floor: shapes, not timings."""

from __future__ import annotations

import pytest

from pagedkv_edu.bench.serve import (CATEGORIES, copy_bandwidth, decode_floor, make_setup, profile_engine,
                                     run_engine, weight_bytes)
from pagedkv_edu.model.loading import load_model


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random")


def test_the_profile_splits_every_step_kind_into_categories_that_add_up(tiny) -> None:
    setup = make_setup(tiny, num_requests=3, length_scale=1 / 32, block_size=4)
    rows = profile_engine(tiny, setup)
    assert "prefill" in rows and "decode" in rows
    for kind, row in rows.items():
        assert row["steps"] >= 1
        parts = [row[c] for c in CATEGORIES] + [row["other"]]
        assert all(p >= 0 for p in parts[:-1]) and row["linear"] > 0 and row["attention"] > 0
        assert sum(parts) == pytest.approx(row["total_s"], abs=1e-3)


def test_the_decode_floor_is_weights_plus_kv_over_the_measured_bandwidth(tiny) -> None:
    timeline = {"elapsed_s": [0.0, 1.0, 1.5, 1.75], "step_kind": ["prefill", "prefill", "decode", "decode"],
                "step_kv_tokens": [10, 20, 21, 23]}
    out = decode_floor(timeline, weights=1000, kv_bytes_per_token=10, bandwidth=100.0)
    assert out["decode_steps"] == 2
    assert out["mean_step_s"] == pytest.approx((0.5 + 0.25) / 2)
    assert out["mean_floor_s"] == pytest.approx(((1000 + 210) / 100 + (1000 + 230) / 100) / 2)
    assert decode_floor({"elapsed_s": [0.0], "step_kind": ["prefill"], "step_kv_tokens": [3]}, 1, 1, 1.0) == \
        {"decode_steps": 0}
    assert copy_bandwidth(num_bytes=2**20, repeats=2) > 0
    params = sum(t.numel() * t.element_size() for t in tiny.hf_model.parameters())
    assert weight_bytes(tiny) == params              # every weight once (tied embeddings counted once)


def test_a_run_records_each_steps_kind_and_the_context_it_read(tiny) -> None:
    setup = make_setup(tiny, num_requests=2, length_scale=1 / 64, output_scale=0.01, block_size=4)
    run = run_engine(tiny, setup, "paged")
    kinds, kv = run["timeline"]["step_kind"], run["timeline"]["step_kv_tokens"]
    assert kinds[0] == "prefill" and kinds[-1] in ("decode", "prefill", "mixed") and len(kinds) == run["steps"]
    assert kv[0] == sum(len(p) for p in setup.prompts) or kv[0] > 0


def test_repeats_alternate_the_engine_and_static_generate_and_report_the_median_pair(capsys) -> None:
    import json

    from pagedkv_edu.bench.serve import print_table
    from pagedkv_edu.cli import main

    args = ["serve-bench", "--model", "tiny-random", "--num-requests", "3", "--length-scale", "0.03125",
            "--output-scale", "0.02", "--block-size", "4", "--policy", "paged", "--peers"]
    assert main([*args, "--repeats", "3", "--json"]) == 0
    vs = json.loads(capsys.readouterr().out)["vs_transformers_static"]
    ratios = sorted(pair["ratio"] for pair in vs["pairs"])
    assert len(vs["pairs"]) == 3 and vs["same_tokens"] and abs(vs["throughput_ratio"] - ratios[1]) <= 0.01
    assert all(pair["engine_s"] > 0 and pair["static_s"] > 0 for pair in vs["pairs"])
    print_table({"model": "m", "device": "d", "num_requests": 3, "length_scale": 1, "output_scale": 1,
                 "kv_budget_tokens": 1, "block_size": 4, "max_seq_len": 8, "runs": {}, "torch_threads": 2,
                 "vs_transformers_static": vs})
    assert f"median of 3 alternating pairs: {', '.join(str(p['ratio']) + 'x' for p in vs['pairs'])}" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--repeats 2 pairs the paged engine"):
        main([*args[:-1], "--repeats", "2"])
