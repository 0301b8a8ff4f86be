"""Static against continuous batching on one scheduler, chunked prefill's token budget, and the step-cost model."""

from __future__ import annotations

import pytest

from pagedkv_edu.sim.batching import serve
from pagedkv_edu.sim.decode_cost import (A100_PCIE, H200, Device, StepCost, batch_where_batching_stops_paying,
                                         cost_table, decode_step_seconds, kv_equals_weights, kv_share)
from pagedkv_edu.specs import get_spec
from pagedkv_edu.workload import Request, copilot50

REQS = copilot50(seed=0, num_requests=20, length_scale=1 / 8)


@pytest.mark.parametrize("mode", ["static", "continuous"])
def test_every_request_gets_every_token(mode: str) -> None:
    r = serve(REQS, mode, kv_budget_tokens=4096, max_num_seqs=6, block_size=4)
    assert sorted(t.request_id for t in r.requests) == [q.request_id for q in REQS]
    assert {t.request_id: len(t.token_times) for t in r.requests} == {q.request_id: q.output_len for q in REQS}
    assert all(s.running <= 6 for s in r.steps)
    assert r.output_tokens == sum(q.output_len for q in REQS)
    assert all(t.ttft > 0 and t.latency >= t.ttft for t in r.requests)


def test_static_batches_wait_for_the_whole_batch() -> None:
    r = serve(REQS, "static", kv_budget_tokens=4096, max_num_seqs=6, block_size=4)
    first = sorted(r.requests, key=lambda t: t.first_token_step)
    batch_one_done = max(t.token_times[-1] for t in first[:6])
    assert all(t.token_times[0] > batch_one_done for t in first[6:])   # nobody starts before the batch ends
    admitted_after = [s.running for s in r.steps]
    assert max(admitted_after) == 6 and min(admitted_after[:5]) == 6


def test_continuous_beats_static_on_the_same_requests() -> None:
    static = serve(REQS, "static", kv_budget_tokens=4096, max_num_seqs=6, block_size=4)
    cont = serve(REQS, "continuous", kv_budget_tokens=4096, max_num_seqs=6, block_size=4)
    assert cont.num_steps < static.num_steps and cont.throughput > static.throughput
    assert cont.mean_ttft < static.mean_ttft and cont.mean_running > static.mean_running


@pytest.mark.parametrize("cap", [None, 64, 17])
def test_the_token_budget_is_honoured(cap: int | None) -> None:
    long = [Request(99, 150, 3, arrival_ms=4.0)]
    r = serve(REQS + long, "continuous", kv_budget_tokens=4096, max_num_seqs=32, block_size=4,
              max_num_batched_tokens=cap)
    if cap is None:
        assert max(s.prefill_tokens for s in r.steps) >= 150
    else:
        assert all(s.prefill_tokens + s.decode_tokens <= cap for s in r.steps)
        assert sum(s.prefill_tokens >= cap - 10 for s in r.steps) >= 150 // cap   # the long prompt, chunk by chunk


def test_chunking_trades_time_to_first_token_for_stalls() -> None:
    base = copilot50(seed=0, num_requests=8)
    longs = [Request(100, 8000, 20, arrival_ms=20.0)]
    runs = {cap: serve(base + longs, "continuous", kv_budget_tokens=65536, max_num_seqs=16, max_num_batched_tokens=cap)
            for cap in (None, 2048, 512)}
    stall = [runs[c].max_itl for c in (None, 2048, 512)]
    ttft = [runs[c].request(100).ttft for c in (None, 2048, 512)]
    assert stall[0] > stall[1] > stall[2] and ttft[0] < ttft[1] < ttft[2]


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        serve(REQS, "dynamic", kv_budget_tokens=4096, max_num_seqs=4)
    with pytest.raises(ValueError, match="can never fit"):
        serve([Request(0, 100, 10)], kv_budget_tokens=64, max_num_seqs=4)
    with pytest.raises(ValueError, match="ask for no token"):
        serve([Request(0, 10, 0)], kv_budget_tokens=64, max_num_seqs=4)


def test_decode_bytes_are_weights_plus_the_caches() -> None:
    smol = get_spec("smollm2-135m")
    assert smol.kv_bytes_per_token == 30 * 3 * 64 * 2 * 2
    assert StepCost(smol).bytes_moved([(1, 999), (1, 23)]) == smol.weight_bytes + 1024 * smol.kv_bytes_per_token
    assert kv_share(smol, 20, 1024) > 0.5 > kv_share(smol, 10, 512)       # at 1k context 20 sequences read more cache than weights
    assert 11 < kv_equals_weights(smol, 1024) < 12
    llama = get_spec("llama-3.2-1b")
    assert decode_step_seconds(llama, 20, 1024) / decode_step_seconds(llama, 10, 1024) < 1.2 < \
        decode_step_seconds(smol, 20, 1024) / decode_step_seconds(smol, 10, 1024)
    assert batch_where_batching_stops_paying(smol, 1024) < batch_where_batching_stops_paying(llama, 1024)
    assert batch_where_batching_stops_paying(llama, 4096) < batch_where_batching_stops_paying(llama, 1024)
    cost = StepCost(llama, H200)
    assert cost([]) == 0.0
    assert cost.decode_ms(1, 1) == pytest.approx(1e3 * (llama.weight_bytes + llama.kv_bytes_per_token) / 4.3e12)
    with pytest.raises(ValueError, match="gain must be above 1"):
        batch_where_batching_stops_paying(llama, 1024, gain=1.0)


def test_a_step_prices_prefill_attention_and_the_reread_of_earlier_chunks() -> None:
    llama = get_spec("llama-3.2-1b")
    cost = StepCost(llama, H200)
    per_pair = 4 * llama.num_layers * llama.num_heads * llama.head_dim
    # 3 new tokens after 5 cached: causally 3 * 5 + (1 + 2 + 3) = 21 (query, key) pairs
    assert cost.flops([(3, 5)]) == 2 * llama.num_parameters * 3 + 21 * per_pair
    assert cost.bytes_moved([(3, 5)]) == llama.weight_bytes + 8 * llama.kv_bytes_per_token
    # a prompt's second chunk costs more than its first: it re-reads the first and attends over it
    assert cost.prefill_ms(2048, cached=2048) > cost.prefill_ms(2048) > 0
    # a long prefill is arithmetic-bound, at the achieved (MFU) rate, not the peak
    assert cost.prefill_ms(8000) == pytest.approx(1e3 * cost.flops([(8000, 0)]) / (H200.flops * H200.mfu))
    assert cost.decode_ms(16, 1024) == pytest.approx(1e3 * cost.bytes_moved([(1, 1023)] * 16) / H200.bandwidth)
    with pytest.raises(ValueError, match="new tokens"):
        cost([(0, 4)])


def test_a_device_refuses_impossible_numbers_and_the_table_names_them() -> None:
    with pytest.raises(ValueError, match="mfu"):
        Device("x", 1e12, 1e14, 1.5, 1e9, 0.0)
    with pytest.raises(ValueError, match="bandwidth"):
        Device("x", 0.0, 1e14, 0.5, 1e9, 0.0)
    table = cost_table(get_spec("llama-3.2-1b"), H200, A100_PCIE)
    assert "0.50" in table and "0.48" in table and "4.30 TB/s" in table and "A100" in table


def test_an_arrival_lands_at_the_same_time_whatever_the_budget() -> None:
    base = copilot50(seed=0, num_requests=6)
    late = Request(50, 300, 5, arrival_ms=40.0)
    for cap in (None, 64):
        r = serve(base + [late], "continuous", kv_budget_tokens=65536, max_num_seqs=16, max_num_batched_tokens=cap)
        times = r.request(50)
        assert times.arrival == 40.0 and times.token_times[0] > 40.0
    idle = serve([Request(0, 10, 2, arrival_ms=100.0)], kv_budget_tokens=4096, max_num_seqs=4)
    assert idle.request(0).token_times[0] > 100.0 and idle.request(0).ttft < 5.0   # the idle engine waited for it
