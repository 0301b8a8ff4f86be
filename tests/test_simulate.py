"""The memory-only serving simulation: contiguous reservations against paging, step by step."""

from __future__ import annotations

import json

import pytest

from pagedkv_edu.core.block_table import blocks_needed
from pagedkv_edu.sim.contiguous import RESERVE_POLICIES
from pagedkv_edu.sim.simulate import WASTE_KINDS, SimResult, simulate
from pagedkv_edu.workload import MAX_SEQ_LEN, Request, copilot50

BUDGET = 10 * MAX_SEQ_LEN  # the CLI's default: ten contiguous max_seq_len reservations


@pytest.fixture(scope="module")
def runs() -> dict[str, SimResult]:
    """The seed-000 workload under every policy, on the same budget."""
    reqs = copilot50(0)
    out = {"paged": simulate(reqs, "paged", BUDGET, block_size=16)}
    for reserve in RESERVE_POLICIES:
        out[reserve] = simulate(reqs, "contiguous", BUDGET, reserve=reserve)
    return out


def check_run(result: SimResult, requests: list[Request]) -> None:
    """What every run must satisfy, whatever the policy."""
    by_id = {r.request_id: r for r in requests}
    assert sorted(rec.request_id for rec in result.requests) == sorted(by_id)
    for rec in result.requests:
        r = by_id[rec.request_id]
        assert rec.admit_step is not None and rec.finish_step is not None, rec
        assert r.arrival_step <= rec.admit_step <= rec.finish_step
        # The engine's rule: the prefill samples the first token, each later step one more.
        assert rec.finish_step - rec.admit_step >= r.output_len - 1
        assert rec.queue_delay == rec.admit_step - r.arrival_step >= 0
    assert [s.step for s in result.steps] == list(range(result.total_steps))
    last_finish = max(rec.finish_step for rec in result.requests)
    assert last_finish == result.total_steps - 1
    for s in result.steps:
        parts = (s.used, s.over_reserved, s.internal, s.external, s.free)
        assert all(p >= 0 for p in parts), s
        assert sum(parts) == result.capacity, s
        assert s.running <= len(requests) and s.waiting <= len(requests)
    assert sum(rec.preemptions for rec in result.requests) == result.preemptions
    assert result.utilisation + sum(result.waste_fractions.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["paged", *RESERVE_POLICIES])
def test_every_request_finishes_and_every_slot_is_accounted_for(runs, name) -> None:
    check_run(runs[name], copilot50(0))


def test_paged_has_no_over_reservation_or_external_fragmentation_and_under_a_block_of_waste(runs) -> None:
    paged = runs["paged"]
    assert paged.capacity == (BUDGET // 16) * 16
    for s in paged.steps:
        assert s.over_reserved == 0 and s.external == 0
        assert s.internal <= s.running * (16 - 1), s  # each sequence wastes at most block_size - 1
    assert paged.max_waste_per_sequence() < 16


def test_paged_utilisation_meets_the_papers_target(runs) -> None:
    assert runs["paged"].utilisation >= 0.96


def test_paging_fits_more_requests_and_finishes_sooner_than_contiguous(runs) -> None:
    paged, contiguous = runs["paged"], runs["max"]
    # Every max_seq_len reservation is the same size, so exactly budget // max_seq_len run at once.
    assert contiguous.peak_concurrency == BUDGET // MAX_SEQ_LEN
    assert paged.peak_concurrency > contiguous.peak_concurrency
    assert paged.mean_concurrency > contiguous.mean_concurrency
    assert paged.total_steps < contiguous.total_steps
    assert paged.mean_queue_delay < contiguous.mean_queue_delay
    assert paged.utilisation > contiguous.utilisation


def test_tighter_reservation_rules_waste_less_but_fragment(runs) -> None:
    """max < pow2 < oracle in utilisation; only the variable-size rules strand free space."""
    assert runs["max"].utilisation < runs["pow2"].utilisation < runs["oracle"].utilisation < runs["paged"].utilisation
    # A budget that is a multiple of max_seq_len leaves only max_seq_len-sized holes: nothing stranded.
    assert all(s.external == 0 for s in runs["max"].steps)
    assert sum(s.external for s in runs["oracle"].steps) > 0
    # The oracle reserves exactly the final length: no internal fragmentation, but still over-reservation.
    assert all(s.internal == 0 for s in runs["oracle"].steps)
    assert sum(s.over_reserved for s in runs["oracle"].steps) > 0


def test_contiguous_internal_and_over_reservation_follow_the_reservations(runs) -> None:
    """With 'max', a running request holds max_seq_len slots: final_len - length ahead, the rest never used."""
    for s in runs["max"].steps:
        assert s.used + s.over_reserved + s.internal == s.running * MAX_SEQ_LEN


def test_a_single_paged_request_by_hand() -> None:
    """5 prompt tokens, 3 outputs, blocks of 4: two blocks; the third output is sampled in step 2, never stored."""
    result = simulate([Request(0, 5, 3)], "paged", 16, block_size=4)
    assert [(s.used, s.internal, s.free) for s in result.steps] == [(5, 3, 8), (6, 2, 8), (7, 1, 8)]
    assert (result.requests[0].admit_step, result.requests[0].finish_step) == (0, 2)


def test_a_single_contiguous_request_by_hand() -> None:
    result = simulate([Request(0, 5, 3)], "contiguous", 32, max_seq_len=16, reserve="max")
    assert [(s.used, s.over_reserved, s.internal, s.free) for s in result.steps] == \
        [(5, 2, 9, 16), (6, 1, 9, 16), (7, 0, 9, 16)]   # it fills 7 slots: the last output is never stored


def test_external_fragmentation_is_measured_against_the_next_request() -> None:
    """Two 4-slot requests end early and leave two 4-slot holes; the waiting 8-slot request sees 8 stranded."""
    reqs = [Request(0, 4, 1), Request(1, 2, 3), Request(2, 4, 1), Request(3, 2, 3), Request(4, 8, 1)]
    result = simulate(reqs, "contiguous", 16, max_seq_len=16, reserve="oracle")
    check_run(result, reqs)
    # Requests 0 and 2 sample their one token in step 0 and leave: holes [0,4) and [8,12) at step 1,
    # and request 4 needs 8 contiguous slots.
    assert [r.finish_step for r in result.requests[:4]] == [0, 2, 0, 2]
    assert result.steps[1].external == 8 and result.steps[1].waiting == 1
    assert result.requests[4].admit_step > 1


def test_paged_preempts_when_the_pool_runs_dry_and_still_finishes_everyone() -> None:
    reqs = copilot50(0, 12)
    tight = max(blocks_needed(r.final_len, 16) for r in reqs) * 16 + 16 * 8
    result = simulate(reqs, "paged", tight, block_size=16)
    check_run(result, reqs)
    assert result.preemptions > 0
    assert any(rec.preemptions for rec in result.requests)


def test_a_watermark_never_starves_a_request_that_fits_an_idle_pool() -> None:
    """The prompt needs the whole pool; a watermark only protects running requests."""
    result = simulate([Request(0, 15, 1)], "paged", 16, block_size=4, watermark_blocks=1, max_steps=50)
    check_run(result, [Request(0, 15, 1)])


def test_later_arrivals_are_admitted_no_earlier_than_they_arrive() -> None:
    reqs = copilot50(1, 20, arrival_rate=0.05)
    for policy in ("paged", "contiguous"):
        check_run(simulate(reqs, policy, BUDGET), reqs)


def test_arena_snapshots_show_the_reservations_as_they_were() -> None:
    reqs = copilot50(0, 20)
    result = simulate(reqs, "contiguous", BUDGET, reserve="pow2", snapshot_steps=[0, 50])
    assert sorted(result.arena_snapshots) == [0, 50]
    for step, slices in result.arena_snapshots.items():
        ends = [0] + [s.start + s.size for s in slices]
        assert all(s.start >= end for s, end in zip(slices, ends))  # sorted, never overlapping
        assert ends[-1] <= BUDGET
        assert all(s.used <= s.final_len <= s.size for s in slices)
        assert len(slices) == result.steps[step].running


def test_summary_and_timeline_are_json(runs) -> None:
    result = runs["paged"]
    summary = json.loads(json.dumps(result.summary()))
    assert summary["policy"] == "paged" and summary["block_size"] == 16 and summary["reserve"] is None
    assert summary["peak_concurrency"] == result.peak_concurrency
    assert set(summary["waste"]) == set(WASTE_KINDS)
    full = json.loads(json.dumps(result.to_dict()))
    assert len(full["steps"]) == result.total_steps and len(full["requests"]) == 50
    assert runs["max"].summary()["reserve"] == "max" and runs["max"].summary()["block_size"] is None


# --- bad input ------------------------------------------------------------------------------
REQS = [Request(0, 10, 5), Request(1, 20, 5)]


@pytest.mark.parametrize("kwargs, bad", [
    (dict(policy="lru"), "unknown policy 'lru'"),
    (dict(kv_budget_tokens=0), "kv_budget_tokens must be a whole number >= 1, got 0"),
    (dict(kv_budget_tokens=-64), "got -64"),
    (dict(kv_budget_tokens=100.0), "got 100.0"),
    (dict(policy="paged", block_size=0), "block_size must be a whole number >= 1, got 0"),
    (dict(policy="paged", block_size=-16), "block_size must be a whole number >= 1, got -16"),
    (dict(policy="paged", kv_budget_tokens=8, block_size=16), "kv_budget_tokens=8 is smaller than one block of 16"),
    (dict(policy="paged", watermark_blocks=-1), "watermark_blocks must be a whole number >= 0, got -1"),
    (dict(policy="contiguous", reserve="half"), "unknown reservation policy 'half'"),
    (dict(max_seq_len=24), "request 1: 25 tokens exceed max_seq_len=24"),
    (dict(policy="contiguous", kv_budget_tokens=2047), r"requests \[0, 1\] can never fit in a budget of 2047"),
    (dict(policy="paged", kv_budget_tokens=16, block_size=4), r"requests \[1\] can never fit in a budget of 16"),
])
def test_bad_parameters_are_refused_by_value(kwargs, bad) -> None:
    with pytest.raises(ValueError, match=bad):
        simulate(REQS, **kwargs)


@pytest.mark.parametrize("requests, bad", [
    ([], "no requests to simulate"),
    ([Request(0, 0, 5)], "request 0 has an empty prompt"),
    ([Request(3, 10, 5), Request(3, 12, 5)], "request ids are not unique"),
])
def test_bad_workloads_are_refused(requests, bad) -> None:
    for policy in ("paged", "contiguous"):
        with pytest.raises(ValueError, match=bad):
            simulate(requests, policy)


def test_a_run_that_does_not_finish_in_max_steps_says_so() -> None:
    with pytest.raises(RuntimeError, match="did not finish within 10 steps"):
        simulate([Request(0, 10, 50)], "paged", max_steps=10)


def test_prefix_caching_never_reports_more_than_all_of_memory() -> None:
    """Shared blocks count once: utilisation and arena utilisation stay at or below 1 (issue 13)."""
    result = simulate(copilot50(0), "paged", BUDGET, enable_prefix_caching=True)
    summary = result.summary()
    assert summary["prefix_caching"]["hit_rate"] > 0.2
    assert summary["utilisation"] <= 1 and summary["saturated_arena_utilisation"] <= 1
    assert all(s.used <= result.capacity for s in result.steps)


def test_chunked_prefill_in_the_simulator_finishes_everyone_under_the_budget() -> None:
    reqs = copilot50(0, 12, length_scale=1 / 8)
    whole = simulate(reqs, "paged", 2048)
    chunked = simulate(reqs, "paged", 2048, max_num_batched_tokens=32)
    check_run(chunked, reqs)
    assert chunked.tokens.prefill_tokens >= whole.tokens.prefill_tokens and chunked.total_steps > whole.total_steps
