"""Routing across replicas (chapter 11): hand-worked traces per policy, the hybrid's edges, the cost model's
worked examples, the two load signals, runs over seeds, and each replica's cache against an engine that served
its requests alone."""

from __future__ import annotations

import random

import pytest

from pagedkv_edu.sim.decode_cost import H200, StepCost
from pagedkv_edu.sim.routing import (DECODE_BATCH, DECODE_CONTEXT, GPU_COST, POLICIES, CostModel, HybridThresholds,
                                     Replica, RouterTree, Spread, fallback_counts, hybrid_choice, make_policy,
                                     offered_load, offered_memory, over_seeds, prefill_hybrid_choice, route,
                                     smallest_tree_choice, spreads)
from pagedkv_edu.sim.routing_workloads import WORKLOADS, TimedRequest, chats, consultants, tenants
from pagedkv_edu.specs import get_spec

A = tuple(range(1000, 1016))      # four blocks of 4: two "system prompts"
B = tuple(range(2000, 2016))


def req(i: int, t: float, prompt: tuple[int, ...], out: int = 4, group: str = "") -> TimedRequest:
    return TimedRequest(i, t, prompt, tuple(range(9000 + 10 * i, 9000 + 10 * i + out)), group or f"g{i}")


def own(i: int, n: int = 3) -> tuple[int, ...]:
    return tuple(range(5000 + 100 * i, 5000 + 100 * i + n))


SLOW = CostModel.flat(prefill_ms_per_token=1.0, decode_ms_per_token=100.0)   # everything stays outstanding


def replicas_of(run) -> list[int]:
    return [o.replica for o in run.outcomes]


# --- the cost model ------------------------------------------------------------------------------
def test_ttft_worked_example_with_a_flat_cost() -> None:
    """Two consultants on one replica, a flat 0.05 ms per prefill token.

    r0 arrives at 0 ms with 825 tokens, nothing cached: TTFT = 825 × 0.05 = 41.25 ms.
    r1 arrives at 10 ms with the same 200-token system prompt: 12 full blocks (192 tokens) are
    cached, 633 are computed. It waits for r0's prefill (until 41.25 ms): TTFT = 31.25 + 31.65 = 62.9 ms.
    """
    system = tuple(range(100, 300))
    r0 = TimedRequest(0, 0.0, system + tuple(range(10_000, 10_625)), tuple(range(5)), "system prompt")
    r1 = TimedRequest(1, 10.0, system + tuple(range(20_000, 20_625)), tuple(range(5)), "system prompt")
    run = route([r0, r1], "round-robin", 1, cost=CostModel.flat(0.05, 2.0))
    first, second = run.outcomes
    assert (first.hit_tokens, first.ttft_ms) == (0, pytest.approx(41.25))
    assert second.hit_tokens == 192 and second.computed_tokens == 633
    assert second.queue_ms == pytest.approx(31.25) and second.ttft_ms == pytest.approx(62.9)
    assert second.finish_ms == pytest.approx(41.25 + 31.65 + 5 * 2.0)
    assert run.prefill_tokens == 825 + 633 and run.hit_rate == pytest.approx(192 / 1650)


def test_ttft_worked_example_on_the_gpu() -> None:
    """The same two prompts with the book's cost model, the second arriving at 2 ms, inside the first's prefill.

    Worked by hand from the roofline (Llama-3.2-1B on an H200): r0's 825 tokens are compute-bound,
    2 × 1.236e9 × 825 FLOPs of matmuls plus 131,072 FLOPs for each of 825·826/2 causal pairs, over
    989e12 × 0.5 FLOP/s: 4.214 ms. r1 computes 633 tokens after 192 cached: the pairs are
    633 × 192 + 633·634/2, so 3.249 ms, and it waits 4.214 − 2 = 2.214 ms first.
    """
    system = tuple(range(100, 300))
    r0 = TimedRequest(0, 0.0, system + tuple(range(10_000, 10_625)), tuple(range(5)), "system prompt")
    r1 = TimedRequest(1, 2.0, system + tuple(range(20_000, 20_625)), tuple(range(5)), "system prompt")
    first, second = route([r0, r1], "round-robin", 1).outcomes
    spec, flops = get_spec("llama-3.2-1b"), 989e12 * 0.5
    attention = 4 * spec.num_layers * spec.num_heads * spec.head_dim

    def by_hand(q: int, c: int) -> float:
        return 1e3 * (2 * spec.num_parameters * q + attention * (q * c + q * (q + 1) // 2)) / flops

    assert first.ttft_ms == pytest.approx(by_hand(825, 0)) == pytest.approx(4.214, abs=1e-3)
    assert second.hit_tokens == 192 and second.queue_ms == pytest.approx(by_hand(825, 0) - 2.0)
    assert second.ttft_ms - second.queue_ms == pytest.approx(by_hand(633, 192)) == pytest.approx(3.249, abs=1e-3)
    assert by_hand(633, 192) > by_hand(633, 0)            # the cached prefix is attended to: a hit is not free
    assert second.finish_ms == pytest.approx(second.first_token_ms + 5 * GPU_COST.decode_ms_per_token)


def test_the_gpu_cost_is_the_books_one_cost_model() -> None:
    step = StepCost(get_spec("llama-3.2-1b"), H200)
    assert GPU_COST == CostModel.for_gpu() and GPU_COST.step == step
    assert GPU_COST.decode_ms_per_token == step.decode_ms(DECODE_BATCH, DECODE_CONTEXT) == pytest.approx(0.6997, abs=1e-4)
    assert GPU_COST.prefill_ms(633, 192) == step.prefill_ms(633, cached=192)
    # below the ridge a prefill costs about one read of the weights (and its own K/V written), however short
    weights_ms = step.spec.weight_bytes / 4.3e12 * 1e3
    assert GPU_COST.prefill_ms(10) == pytest.approx(weights_ms, rel=2e-3) == GPU_COST.prefill_ms(100)
    assert GPU_COST.prefill_ms(10) < GPU_COST.prefill_ms(100) < 1.01 * weights_ms < GPU_COST.prefill_ms(400)
    assert CostModel.for_gpu(decode_batch=64).decode_ms_per_token > GPU_COST.decode_ms_per_token
    assert CostModel.flat(0.5, 1.0).prefill_ms(10, 500) == 5.0          # flat: the cached prefix costs nothing


def test_offered_load_is_prefill_work_per_replica_over_time() -> None:
    # three 100-token prompts 10 ms apart on two replicas, 1 ms a token: 100 ms of work per 10 ms, over 2
    trace = [req(i, 10.0 * i, own(i, 100)) for i in range(3)]
    assert offered_load(trace, 2, CostModel.flat(1.0, 1.0)) == pytest.approx(100 / 10 / 2)
    assert offered_load(trace, 1, GPU_COST) == pytest.approx(GPU_COST.prefill_ms(100) / 10)
    with pytest.raises(ValueError, match="at least two"):
        offered_load(trace[:1], 2)
    with pytest.raises(ValueError, match="at once"):
        offered_load([req(0, 5.0, own(0)), req(1, 5.0, own(1))], 2)


def test_a_request_waits_for_blocks_when_the_pool_is_full() -> None:
    # 4 blocks of 4; each request holds 3 (8 prompt + 4 output tokens): the second waits for the first to finish
    run = route([req(0, 0, own(0, 8)), req(1, 0, own(1, 8))], "round-robin", 1, num_blocks=4, block_size=4, cost=SLOW)
    first, second = run.outcomes
    assert second.start_ms == first.finish_ms == pytest.approx(8 + 400)


# --- each policy on a hand-worked trace ------------------------------------------------------------
def test_round_robin_cycles() -> None:
    run = route([req(i, i, own(i)) for i in range(5)], "round-robin", 2, block_size=4)
    assert replicas_of(run) == [0, 1, 0, 1, 0]


def test_least_loaded_counts_outstanding_requests() -> None:
    quick = CostModel.flat(prefill_ms_per_token=1.0, decode_ms_per_token=1.0)
    # r0 (long answer) -> 0; r1 -> 1; r1 is done (3 + 4 ms) when r2 arrives at 20 ms, r0 is not: r2 -> 1
    trace = [req(0, 0, own(0), out=100), req(1, 1, own(1)), req(2, 20, own(2))]
    run = route(trace, "least-loaded", 2, block_size=4, cost=quick)
    assert replicas_of(run) == [0, 1, 1]
    assert [d["loads"] for d in run.decisions] == [[0, 0], [1, 0], [1, 0]]


def test_power_of_two_takes_the_less_loaded_of_two() -> None:
    run = route([req(i, i, own(i)) for i in range(40)], "power-of-two", 2, block_size=4, cost=SLOW)
    for decision in run.decisions:      # with two replicas both are drawn: it is least-loaded
        loads = decision["loads"]
        if loads[0] != loads[1]:
            assert decision["replica"] == loads.index(min(loads))
    assert route([req(i, i, own(i)) for i in range(40)], "power-of-two", 2, block_size=4, cost=SLOW,
                 seed=0).outcomes == run.outcomes   # seeded


def test_consistent_hash_keys_on_the_prefix_not_the_load() -> None:
    trace = [req(i, i, (A if i % 2 else B) + own(i)) for i in range(12)]
    run = route(trace, "consistent-hash", 4, block_size=4, key_tokens=16, cost=SLOW)
    on_a = {o.replica for o in run.outcomes if o.request_id % 2}
    on_b = {o.replica for o in run.outcomes if not o.request_id % 2}
    assert len(on_a) == 1 and len(on_b) == 1            # one replica per prefix, however loaded
    spread = route([req(i, i, own(i, 40)) for i in range(64)], "consistent-hash", 4, block_size=4, key_tokens=8)
    assert set(replicas_of(spread)) == {0, 1, 2, 3}      # distinct prefixes spread over the ring


def test_prefix_affinity_follows_the_longest_cached_match() -> None:
    trace = [req(0, 0, A + own(0)), req(1, 1, B + own(1)), req(2, 2, A + own(2)), req(3, 3, A + own(3)),
             req(4, 4, B + own(4))]
    run = route(trace, "prefix-affinity", 2, block_size=4, cost=SLOW)
    assert replicas_of(run) == [0, 1, 0, 0, 1]           # r1 matches nothing: the less loaded; then each prefix home
    assert [o.hit_tokens for o in run.outcomes] == [0, 0, 16, 16, 16]
    assert run.decisions[3]["loads"] == [2, 1]            # r3 goes to the busier replica: affinity ignores load


def test_hybrid_goes_least_loaded_when_imbalanced_by_both_thresholds() -> None:
    trace = [req(0, 0, A + own(0))] + [req(i, i, A + own(i)) for i in range(1, 6)]
    tight = HybridThresholds(cache_threshold=0.3, abs_threshold=2, rel_threshold=1.5)
    run = route(trace, "hybrid", 2, block_size=4, cost=SLOW, thresholds=tight)
    # loads seen: [0,0] -> 0 (nothing cached, least loaded); [1,0] match 16/19 on 0 -> 0; [2,0] -> 0;
    # [3,0]: 3 - 0 > 2 and 3 > 0: imbalanced -> 1 (which now caches A too); [3,1]: 2 is not > 2, balanced,
    # both match 16 tokens: the less loaded, 1; [3,2] -> 1 again
    assert [d["loads"] for d in run.decisions] == [[0, 0], [1, 0], [2, 0], [3, 0], [3, 1], [3, 2]]
    assert [d["matches"] for d in run.decisions][3:] == [[16, 0], [16, 16], [16, 16]]
    assert replicas_of(run) == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize("loads, matches, expected", [
    ([10, 2], [0, 0], 1),          # 8 is not > 8: balanced; no match: least loaded
    ([10, 2], [15, 0], 0),         # balanced (8 is not > 8): the match, 15/20 > 0.3
    ([11, 2], [15, 0], 1),         # 9 > 8 and 11 > 3: imbalanced, least loaded
    ([12, 8], [15, 0], 0),         # 4 is not > 8: balanced
    ([30, 20], [15, 0], 0),        # 10 > 8 but 30 is not > 1.5 x 20: balanced
    ([31, 20], [15, 0], 1),        # 11 > 8 and 31 > 30: imbalanced
    ([3, 3], [6, 0], 0),           # 6/20 = 0.3 is not > 0.3: least loaded, the first of equals
    ([3, 3], [0, 7], 1),           # 7/20 = 0.35 > 0.3: the match
])
def test_hybrid_thresholds_at_their_edges(loads: list[int], matches: list[int], expected: int) -> None:
    assert hybrid_choice(loads, matches, 20) == expected


def test_hybrid_match_ratio_edge() -> None:
    assert hybrid_choice([1, 0], [10, 0], 20, cache_threshold=0.5) == 1        # 0.5 is not > 0.5
    assert hybrid_choice([1, 0], [11, 0], 20, cache_threshold=0.5) == 0


# --- the two fallbacks for a weak match: least load (the gateway) and smallest tree (sgl-router before #14650) ----
def test_the_two_fallbacks_differ_on_a_busy_replica_with_a_small_tree() -> None:
    # no match; replica 0 is 8 requests ahead (8 is not > 8: balanced) but its tree is small
    loads, matches, trees = [8, 0], [0, 0], [100, 900]
    assert hybrid_choice(loads, matches, 20) == 1                       # least load: the idle one
    assert smallest_tree_choice(loads, matches, 20, trees) == 0         # smallest tree: the busy one
    # the reports' case (sglang PR #14305's test): 50 outstanding on a 5-character tree, the other idle
    # with 1,000 characters, balance thresholds set high so that only the fallback decides
    loose = dict(cache_threshold=0.5, abs_threshold=100, rel_threshold=10.0)
    assert smallest_tree_choice([50, 0], [0, 0], 17, [5, 1000], **loose) == 0
    assert hybrid_choice([50, 0], [0, 0], 17, **loose) == 1
    # with the chapter's thresholds 50 against 0 is imbalanced: both go to the least loaded
    assert smallest_tree_choice([50, 0], [0, 0], 17, [5, 1000]) == hybrid_choice([50, 0], [0, 0], 17) == 1


def test_the_two_fallbacks_agree_on_a_strong_match() -> None:
    assert smallest_tree_choice([3, 3], [0, 7], 20, [0, 900]) == hybrid_choice([3, 3], [0, 7], 20) == 1   # 7/20 > 0.3
    assert smallest_tree_choice([3, 3], [6, 0], 20, [50, 10]) == 1       # 6/20 is not > 0.3: the smaller tree
    assert smallest_tree_choice([3, 3], [6, 0], 20, [10, 10]) == 0       # equal trees: the first


def test_router_tree_is_one_tree_with_replica_tags() -> None:
    tree = RouterTree(3)
    tree.insert((1, 2, 3), 0)
    tree.insert((1, 2, 4), 0)          # shares (1, 2): one new node for replica 0
    tree.insert((1, 2, 3), 1)          # the same nodes, tagged for replica 1 as well
    assert tree.sizes == [4, 3, 0]     # distinct prefix tokens sent to each replica
    assert tree.tags((1, 2)) == [0, 1] and tree.tags((1, 2, 4)) == [0] and tree.tags((9,)) == []
    assert tree.tags((1, 2, 3, 7)) == [0, 1]                 # the longest prefix in the tree


def test_smallest_tree_policy_ignores_load_on_a_weak_match() -> None:
    # r0: 12 unique tokens -> 0 (all trees empty); r1: 3 tokens, loads [1, 0] -> 1 either way;
    # r2: nothing cached, loads [1, 1]: least load takes the first of equals (0), smallest tree the
    # replica with 3 tokens in the tree (1)
    trace = [req(0, 0, own(0, 12)), req(1, 1, own(1, 3)), req(2, 2, own(2, 8))]
    small = route(trace, "hybrid-smallest-tree", 2, block_size=4, cost=SLOW)
    least = route(trace, "hybrid", 2, block_size=4, cost=SLOW)
    assert replicas_of(small) == [0, 1, 1] and replicas_of(least) == [0, 1, 0]
    assert [d["tree_sizes"] for d in small.decisions] == [[0, 0], [12, 0], [12, 3]]
    assert [d["loads"] for d in small.decisions] == [[0, 0], [1, 0], [1, 1]]


# --- a replica's cache is an engine's cache -------------------------------------------------------
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_each_replica_ends_as_an_engine_that_served_its_requests_alone(workload: str) -> None:
    requests = WORKLOADS[workload](60, 80.0, 1)
    run = route(requests, "hybrid", 3, num_blocks=512)
    by_id = {r.request_id: r for r in requests}
    for k, replica in enumerate(run.replicas):
        mine = [by_id[o.request_id] for o in replica.outcomes]
        alone = route(mine, "round-robin", 1, num_blocks=512).replicas[0]
        assert alone.outcomes == [o.__class__(**{**o.__dict__, "replica": 0}) for o in replica.outcomes]
        assert alone.manager.pool.free_ids() == replica.manager.pool.free_ids()
        assert alone.manager.prefix_cache.num_cached_blocks == replica.manager.prefix_cache.num_cached_blocks
        assert alone.manager.prefix_cache.num_evictions == replica.manager.prefix_cache.num_evictions
        assert {s: t.block_ids for s, t in alone.manager.tables.items()} == \
               {s: t.block_ids for s, t in replica.manager.tables.items()}


def test_without_eviction_a_replica_caches_exactly_what_it_served() -> None:
    requests = tenants(40, 50.0, 2, num_tenants=6)
    run = route(requests, "round-robin", 2, num_blocks=4096)
    for replica in run.replicas:
        assert replica.manager.prefix_cache.num_evictions == 0
        served = {o.request_id for o in replica.outcomes}
        cache = replica.manager.prefix_cache
        for r in requests:
            tokens = r.prompt + r.output
            asked = tokens + (0,)           # one token more: a lookup leaves the last token to compute
            found = cache.lookup(asked, cache.chain(asked)).num_tokens
            if r.request_id in served:
                assert found == len(tokens) // 16 * 16      # every full block it computed is findable
            else:
                assert found < len(tokens) // 16 * 16       # another replica's request: its own tail is not here


def test_hit_rate_and_prefill_tokens_add_up() -> None:
    run = route(consultants(30, 40.0), "round-robin", 3)
    assert run.prefill_tokens + run.hit_tokens == sum(r.prompt_len for r in consultants(30, 40.0))
    # one shared system prompt: each of the three replicas pays it once, everyone else finds its 12 blocks
    assert run.hit_tokens == (30 - 3) * 192


# --- the chapter's claims at small scale ----------------------------------------------------------
def test_affinity_gains_on_many_prefixes_and_little_on_one() -> None:
    gain = {}
    for name, workload in (("consultants", consultants), ("tenants", tenants)):
        requests = workload(120, 40.0, 0)
        rr, aff = route(requests, "round-robin", 4), route(requests, "prefix-affinity", 4)
        gain[name] = aff.hit_rate - rr.hit_rate
    assert gain["consultants"] < 0.01 and gain["tenants"] > 0.15


def test_pure_affinity_sends_one_shared_prompt_to_one_replica() -> None:
    runs = {p: route(consultants(120, 600.0), p, 4) for p in ("prefix-affinity", "hybrid", "least-loaded")}
    assert runs["prefix-affinity"].requests_per_replica == [120, 0, 0, 0]
    assert runs["prefix-affinity"].ttft_ms(99) > 5 * runs["hybrid"].ttft_ms(99)
    assert runs["hybrid"].load_imbalance < 1.3


# --- bad input is refused before anything runs ----------------------------------------------------
def test_bad_input_is_named() -> None:
    requests = consultants(5, 10.0)
    with pytest.raises(ValueError, match="unknown policy 'random'"):
        route(requests, "random")
    with pytest.raises(ValueError, match="num_replicas"):
        route(requests, "round-robin", 0)
    with pytest.raises(ValueError, match="does not fit a replica"):
        route(requests, "round-robin", 2, num_blocks=8)
    with pytest.raises(ValueError, match="distinct"):
        route(requests + requests[:1], "round-robin", 2)
    with pytest.raises(ValueError, match="chose 7"):
        route(requests, lambda request, fleet: 7, 2)
    with pytest.raises(ValueError, match="rel_threshold"):
        HybridThresholds(rel_threshold=0.5)
    with pytest.raises(ValueError, match="rate_per_s"):
        tenants(10, 0.0)
    with pytest.raises(ValueError, match="prefill_ms_per_token"):
        CostModel.flat(-1.0, 2.0)
    with pytest.raises(ValueError, match="decode_ms_per_token"):
        CostModel.flat(1.0, float("nan"))
    with pytest.raises(ValueError, match="not both"):
        CostModel(0.7, step=GPU_COST.step, prefill_ms_per_token=0.05)
    with pytest.raises(ValueError, match="step must be a StepCost"):
        CostModel(0.7, step=0.05)                                      # type: ignore[arg-type]
    with pytest.raises(ValueError, match="new_tokens"):
        GPU_COST.prefill_ms(0)
    with pytest.raises(ValueError, match="warmup"):
        route(requests, "round-robin", 2, warmup=5)                   # nothing left to measure
    with pytest.raises(ValueError, match="abs_threshold_tokens"):
        HybridThresholds(abs_threshold_tokens=-1)


def test_every_policy_is_made_fresh_and_runs() -> None:
    requests = chats(30, 60.0)
    for name in POLICIES:
        first, again = route(requests, name, 3), route(requests, name, 3)
        assert first.outcomes == again.outcomes, name        # no state leaks between runs
        assert callable(make_policy(name, 3))


def test_replica_refuses_a_request_larger_than_its_pool() -> None:
    replica = Replica(4, 4, GPU_COST)
    with pytest.raises(ValueError, match="need 5 blocks"):
        replica.serve(req(0, 0, own(0, 16)), 0)
    assert replica.manager.pool.num_free == 4 and not replica.outcomes


def test_fallback_counts_tells_the_weak_matches_from_the_imbalance_guard() -> None:
    """A balanced weak match is the fallback's, an imbalanced fleet the guard's, a strong match neither's."""
    from pagedkv_edu.sim.routing import HybridThresholds, fallback_counts

    decisions = [{"loads": [0, 0], "matches": [2, 0], "prompt_len": 10},     # 20% match, balanced: the fallback
                 {"loads": [20, 0], "matches": [0, 0], "prompt_len": 10},    # 20 - 0 > 8 and 20 > 0: the guard
                 {"loads": [1, 0], "matches": [8, 0], "prompt_len": 10}]     # 80% match: the match decides
    assert fallback_counts(decisions) == (1, 1)
    assert fallback_counts(decisions, HybridThresholds(cache_threshold=0.9)) == (2, 1)


# --- the second load signal: queued prefill tokens -------------------------------------------------
def test_queued_prefill_tokens_count_the_uncached_tokens_not_yet_prefilled() -> None:
    # one replica, 1 ms a token: r0 (8 tokens) prefills 0..8 ms; r1 (A + 3, arriving at 1) waits until 8 and
    # prefills its 19 tokens until 27; r2 (A + 3 more, at 2) finds A's 16 cached and computes 3, 27..30
    trace = [req(0, 0, own(0, 8)), req(1, 1, A + own(1)), req(2, 2, A + own(2))]
    run = route(trace, "round-robin", 1, block_size=4, cost=CostModel.flat(1.0, 1.0))
    replica = run.replicas[0]
    assert [o.computed_tokens for o in run.outcomes] == [8, 19, 3]
    assert [o.first_token_ms for o in run.outcomes] == [8, 27, 30]
    assert replica.queued_prefill_tokens(2.5) == 8 + 19 + 3      # all three wait or prefill
    assert replica.queued_prefill_tokens(8.0) == 19 + 3           # r0's prefill has ended
    assert replica.queued_prefill_tokens(29.0) == 3 and replica.queued_prefill_tokens(30.0) == 0
    assert replica.load(11.0) == 3 and replica.queued_prefill_tokens(11.0) == 22    # r0 decodes: it queues nothing
    assert replica.load(8 + 4) == 2                               # r0's 4 output tokens done at 12 ms


def test_least_prefill_avoids_queued_work_that_least_loaded_does_not_see() -> None:
    """A long prompt queues on replica 0 while replica 1 holds two short requests that only decode."""
    cost = CostModel.flat(1.0, 100.0)
    trace = [req(0, 0, own(0, 3)), req(1, 0.5, own(1, 3)), req(2, 1, own(2, 90), out=1), req(3, 7, own(3, 3))]
    pinned = [1, 1, 0]                                            # r0, r1 -> replica 1; r2 (90 tokens) -> replica 0

    def then(name: str):
        rest = make_policy(name, 2)

        def choose(request, fleet):
            return pinned[request.request_id] if request.request_id < 3 else rest(request, fleet)
        return choose
    by_requests = route(trace, then("least-loaded"), 2, block_size=4, cost=cost)
    by_prefill = route(trace, then("least-prefill"), 2, block_size=4, cost=cost)
    # at 7 ms replica 0 has 1 request outstanding (90 tokens queued), replica 1 two (decoding, nothing queued)
    assert by_requests.decisions[3]["loads"] == [1, 2] and by_requests.outcomes[3].replica == 0
    assert by_prefill.decisions[3]["prefill_loads"] == [90, 0] and by_prefill.outcomes[3].replica == 1
    assert by_prefill.outcomes[3].ttft_ms < by_requests.outcomes[3].ttft_ms       # it did not queue behind the 90


def test_least_prefill_breaks_ties_on_outstanding_requests() -> None:
    # every replica idle in prefill (0 queued tokens) most of the time: the one with fewer outstanding requests
    trace = [req(i, 10.0 * i, own(i)) for i in range(4)]
    run = route(trace, "least-prefill", 2, block_size=4, cost=SLOW)
    assert [d["prefill_loads"] for d in run.decisions] == [[0, 0], [0, 0], [0, 0], [0, 0]]
    assert replicas_of(run) == [0, 1, 0, 1]


@pytest.mark.parametrize("tokens, loads, matches, expected", [
    ([2049, 0], [0, 9], [15, 0], 1),      # 2,049 - 0 > 2,048 and 2,049 > 0: imbalanced, the least queued prefill
    ([2048, 0], [0, 9], [15, 0], 0),      # 2,048 is not > 2,048: balanced, the match (15/20)
    ([3000, 2100], [0, 9], [15, 0], 0),   # 900 is not > 2,048: balanced
    ([0, 0], [5, 2], [0, 0], 1),          # no match: the least queued prefill; equal, so fewer outstanding
    ([0, 0], [2, 2], [0, 0], 0),          # equal on both: the first
    ([0, 0], [5, 2], [9, 9], 1),          # equal matches: fewer queued tokens, then fewer requests
])
def test_prefill_hybrid_thresholds_are_in_tokens(tokens: list[int], loads: list[int], matches: list[int],
                                                 expected: int) -> None:
    assert prefill_hybrid_choice(tokens, loads, matches, 20) == expected


def test_hybrid_prefill_policy_reads_both_signals() -> None:
    trace = [req(i, i, A + own(i)) for i in range(6)]
    run = route(trace, "hybrid-prefill", 2, block_size=4, cost=SLOW)
    assert all({"prefill_loads", "loads", "matches"} <= set(d) for d in run.decisions)
    weak, guard = fallback_counts(run.decisions, signal="prefill_loads")
    assert (weak, guard) == (1, 0)       # only the first request matches nothing; 19 tokens never pass 2,048
    tight = HybridThresholds(abs_threshold_tokens=20)
    assert fallback_counts(run.decisions, tight, signal="prefill_loads")[1] > 0
    with pytest.raises(ValueError, match="signal"):
        fallback_counts(run.decisions, signal="queue")


# --- a warm-up, and several seeds -----------------------------------------------------------------
def test_the_warmup_is_served_but_not_counted() -> None:
    requests = consultants(30, 40.0)
    cold, warm = route(requests, "round-robin", 3), route(requests, "round-robin", 3, warmup=3)
    assert [o.replica for o in cold.outcomes] == [o.replica for o in warm.outcomes]   # the same run
    assert len(warm.measured) == 27 and sum(warm.requests_per_replica) == 27
    assert cold.hit_tokens == (30 - 3) * 192 and warm.hit_tokens == 27 * 192          # each replica paid in the warm-up
    assert warm.hit_rate > cold.hit_rate
    assert warm.summary()["measured"] == 27 and warm.summary()["warmup"] == 3
    assert warm.ttft_ms(99) == pytest.approx(float(__import__("numpy").percentile(
        [o.ttft_ms for o in cold.outcomes[3:]], 99)))


def test_over_seeds_runs_every_policy_on_the_same_draws() -> None:
    study = over_seeds(tenants, 200.0, ["round-robin", "hybrid"], [3, 4], 2, num_requests=40, warmup=10)
    assert set(study) == {"round-robin", "hybrid"} and all(len(runs) == 2 for runs in study.values())
    for k, seed in enumerate((3, 4)):
        again = route(tenants(40, 200.0, seed), "hybrid", 2, seed=seed, warmup=10)
        assert study["hybrid"][k].outcomes == again.outcomes
        assert study["hybrid"][k].prompt_tokens == study["round-robin"][k].prompt_tokens   # the same draw
    assert study["hybrid"][0].prompt_tokens != study["hybrid"][1].prompt_tokens           # two draws
    figures = spreads(study["hybrid"])
    assert set(figures) == {"hit_rate", "ttft_p50_ms", "ttft_p99_ms", "load_imbalance"}
    assert figures["hit_rate"].values == tuple(run.hit_rate for run in study["hybrid"])
    with pytest.raises(ValueError, match="distinct"):
        over_seeds(tenants, 200.0, ["hybrid"], [1, 1], 2, num_requests=20, warmup=5)


def test_a_spread_is_the_mean_and_the_range() -> None:
    spread = Spread((3.0, 1.0, 2.0))
    assert (spread.mean, spread.low, spread.high) == (2.0, 1.0, 3.0)
    assert f"{spread:.1f}" == "2.0 [1.0–3.0]" and f"{Spread((0.25,)):.0%}" == "25% [25%–25%]"
    with pytest.raises(ValueError, match="at least one"):
        Spread(())


# --- the router's tree, against a trie of one token per node ----------------------------------------
def _per_token_sizes_and_tags(inserted: list[tuple[tuple[int, ...], int]], replicas: int, query: tuple[int, ...]):
    """The definition, computed from scratch: a replica's size is the number of distinct prefixes sent to it."""
    sizes = [len({p[:k] for p, r in inserted if r == rep for k in range(1, len(p) + 1)}) for rep in range(replicas)]
    depth = max((k for k in range(1, len(query) + 1) if any(p[:k] == query[:k] for p, _ in inserted)), default=0)
    tags = sorted({r for p, r in inserted if depth and p[:depth] == query[:depth]})
    return sizes, tags


def test_router_tree_matches_its_definition_on_random_prompts() -> None:
    rng = random.Random(11)
    for _ in range(200):
        tree, inserted = RouterTree(3), []
        for _ in range(rng.randint(1, 10)):
            base = rng.choice(inserted)[0] if inserted and rng.random() < 0.6 else ()
            prompt = base[:rng.randint(0, len(base))] + tuple(rng.randint(0, 3) for _ in range(rng.randint(0, 5)))
            replica = rng.randrange(3)
            tree.insert(prompt, replica)
            inserted.append((prompt, replica))
            query = tuple(rng.randint(0, 3) for _ in range(rng.randint(0, 6)))
            for q in (query, prompt):
                sizes, tags = _per_token_sizes_and_tags(inserted, 3, q)
                assert tree.sizes == sizes and tree.tags(q) == tags, (inserted, q)


def test_offered_memory_is_blocks_held_over_the_pool() -> None:
    # 1 request every 10 ms on one replica; each holds 3 blocks (8 + 4 tokens of 4) for 8 + 4 × 100 ms
    trace = [req(i, 10.0 * i, own(i, 8)) for i in range(3)]
    cost = CostModel.flat(1.0, 100.0)
    assert offered_memory(trace, 1, 300, block_size=4, cost=cost) == pytest.approx(3 * 408 / 10 / 300)
    assert offered_memory(trace, 2, 300, block_size=4, cost=cost) == pytest.approx(3 * 408 / 10 / 300 / 2)
    with pytest.raises(ValueError, match="num_blocks"):
        offered_memory(trace, 1, 0)
    with pytest.raises(ValueError, match="at least two"):
        offered_memory([], 1, 64)


def test_past_full_pools_least_loaded_overtakes_round_robin_on_other_seeds_too() -> None:
    """Chapter 11's sweep shows it on seed 0 at 1,000 consultants a second; two more draws agree."""
    for seed in (1, 2):
        requests = consultants(600, 1000.0, seed)
        assert offered_memory(requests, 4, 3072) > 1                          # the pools are full
        rr, ll = (route(requests, p, 4, warmup=150) for p in ("round-robin", "least-loaded"))
        assert ll.ttft_ms(99) < rr.ttft_ms(99)
