"""Preemption by swap (the paper's §4.5): blocks to host memory and back, token-identical to recompute."""

from __future__ import annotations

import dataclasses

import random

import pytest
import torch

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.engine import LLMEngine, SamplingParams
from pagedkv_edu.core.request import Request, Status
from pagedkv_edu.engine.generate import generate
from pagedkv_edu.model.loading import load_model
from pagedkv_edu.core.scheduler import Scheduler
from pagedkv_edu.attention.kv_cache import copy_blocks_between
from pagedkv_edu.core.swap import SwapSpace
from pagedkv_edu.sim.decode_cost import A100_PCIE
from pagedkv_edu.sim.preemption_cost import OPT_13B, preemption_cost, preemption_costs


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random")


def _prompts(model, n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    vocab = model.model.config.vocab_size
    return [[rng.randrange(100, vocab) for _ in range(rng.randint(5, 30))] for _ in range(n)]


def _serve(model, prompts, mode: str, **kw) -> tuple[LLMEngine, dict[int, list[int]]]:
    engine = LLMEngine(model.model, kv_budget_tokens=kw.pop("budget", 160), block_size=4, max_seq_len=128,
                       watermark=0.0, preemption_mode=mode, **kw)
    for p in prompts:
        engine.add_request(p, SamplingParams(max_tokens=20, ignore_eos=True))
    out = {}
    for _ in range(5000):
        if not engine.has_unfinished:
            break
        for o in engine.step():
            out[o.request_id] = o.token_ids
    assert not engine.has_unfinished
    return engine, out


def test_swap_and_recompute_give_the_same_tokens_under_pressure(tiny) -> None:
    prompts = _prompts(tiny, 10)
    reference = generate(tiny.model, prompts, 20).tokens
    swapped, by_swap = _serve(tiny, prompts, "swap")
    recomputed, by_recompute = _serve(tiny, prompts, "recompute")
    assert swapped.scheduler.num_swaps > 0 and recomputed.scheduler.num_preemptions > 0
    assert [by_swap[i] for i in range(10)] == [by_recompute[i] for i in range(10)] == reference
    # Swapping recomputes nothing: every prefill token is a prompt token, computed once.
    s, r = swapped.stats().tokens, recomputed.stats().tokens
    assert s.prefill_tokens == s.prompt_tokens < r.prefill_tokens
    space = swapped.memory.swap
    assert space.blocks_out == space.blocks_in > 0 and space.pool.num_free == space.pool.num_blocks
    pool = swapped.block_manager.pool
    assert pool.num_free == pool.num_blocks


def test_a_full_swap_space_falls_back_to_recompute_and_loses_nothing(tiny) -> None:
    prompts = _prompts(tiny, 8, seed=2)
    reference = generate(tiny.model, prompts, 20).tokens
    engine, out = _serve(tiny, prompts, "swap", swap_space_tokens=32)   # eight host blocks: some victims recompute
    assert [out[i] for i in range(8)] == reference
    assert 0 < engine.scheduler.num_swaps < engine.scheduler.num_preemptions


def test_swap_with_prefix_caching_and_parallel_sampling(tiny) -> None:
    shared = _prompts(tiny, 1, seed=3)[0][:12]
    prompts = [shared + p[:6] for p in _prompts(tiny, 6, seed=4)]
    params = SamplingParams(max_tokens=12, n=2, temperature=0.8, seed=1, ignore_eos=True)

    def run(mode: str):
        engine = LLMEngine(tiny.model, kv_budget_tokens=120, block_size=4, max_seq_len=64, watermark=0.0,
                           enable_prefix_caching=True, preemption_mode=mode)
        for p in prompts:
            engine.add_request(p, params)
        outs = {}
        while engine.has_unfinished:
            for o in engine.step():
                outs[o.request_id] = [c.token_ids for c in o.completions]
        return engine, outs

    swap_engine, by_swap = run("swap")
    _, by_recompute = run("recompute")
    assert swap_engine.scheduler.num_swaps > 0
    assert by_swap == by_recompute


def test_swap_space_books_balance_and_refuse_before_changing() -> None:
    space = SwapSpace(4, 2)
    a, b = Request("a", None, num_prompt_tokens=3), Request("b", None, num_prompt_tokens=5)
    pairs = space.swap_out(a, [7, 3])
    assert [d for d, _ in pairs] == [7, 3] and space.pool.num_free == 2 and space.tables[a] == [h for _, h in pairs]
    assert not space.can_hold(3)
    with pytest.raises(ValueError, match="needs 3 host blocks; 2 are free"):
        space.swap_out(b, [1, 2, 5])
    assert space.pool.num_free == 2 and b not in space and list(space.tables) == [a]
    with pytest.raises(ValueError, match="holds 2 host blocks; 1 device blocks cannot take them"):
        space.swap_in(a, [0])
    back = space.swap_in(a, [0, 1])
    assert back == [(h, d) for (_, h), d in zip(pairs, [0, 1])] and space.pool.num_free == 4 and a not in space
    assert space.blocks_out == space.blocks_in == 2


def test_the_scheduler_swaps_the_newest_and_brings_it_back_with_its_tokens() -> None:
    manager = BlockManager(3, 2, swap=SwapSpace(4, 2))
    scheduler = Scheduler(manager, preemption_mode="swap")
    params = SamplingParams(max_tokens=2)                  # up to 3 tokens: a sequence alone always fits
    a, b = Request("a", [1, 2], params), Request("b", [3, 4], params)
    for r in (a, b):
        scheduler.add(r)
    scheduler.schedule()
    for r in (a, b):
        r.output_token_ids.append(5)
    step = scheduler.schedule()
    assert step.preempted == [b] and b.status is Status.SWAPPED and scheduler.num_swaps == 1
    assert b.num_computed_tokens == 2 and len(step.copies.swap_out) == 1    # one block went to the host
    assert manager.swap.tables[b] == [h for _, h in step.copies.swap_out] and b not in manager
    scheduler.finish(a)
    step = scheduler.schedule()
    assert step.admitted == [b] and len(step.copies.swap_in) == 1 and b not in manager.swap
    assert step.scheduled[0].num_computed_tokens == 2 and step.scheduled[0].num_new_tokens == 1
    assert not step.scheduled[0].is_prefill


def test_preemption_mode_is_validated(tiny) -> None:
    with pytest.raises(ValueError, match="preemption_mode"):
        LLMEngine(tiny.model, preemption_mode="evict")
    with pytest.raises(ValueError, match="policy='paged'"):
        LLMEngine(tiny.model, policy="contiguous", preemption_mode="swap")
    with pytest.raises(ValueError, match="swap space"):
        Scheduler(BlockManager(4, 2), preemption_mode="swap")


def test_block_copies_move_exactly_the_named_blocks() -> None:
    torch.manual_seed(0)
    device = [torch.randn(5, 2, 3, 4) for _ in range(2)]
    host = [torch.full((3, 2, 3, 4), float("nan")) for _ in range(2)]
    assert copy_blocks_between(device, host, [(4, 0), (1, 2)]) == 4
    for d, h in zip(device, host):
        assert torch.equal(h[0], d[4]) and torch.equal(h[2], d[1]) and h[1].isnan().all()


def test_the_cost_model_has_the_shape_of_fig_19() -> None:
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    costs = preemption_costs(sizes, 1024, **OPT_13B)
    recompute = {c.recompute_s for c in costs}
    assert len(recompute) == 1                                   # recompute does not depend on the block size
    swap = [c.swap_s for c in costs]
    assert all(a > b for a, b in zip(swap, swap[1:]))            # fewer, larger copies: cheaper
    assert costs[0].swap_s > costs[0].recompute_s                # block size 1: swapping loses
    assert costs[-1].swap_s < costs[-1].recompute_s              # block size 256: swapping wins
    # Without a fixed cost per copy, the block size would not matter: the copy count is the mechanism.
    flat = preemption_costs(sizes, 1024, device=dataclasses.replace(A100_PCIE, copy_latency_s=0.0), **OPT_13B)
    assert max(c.swap_s for c in flat) == pytest.approx(min(c.swap_s for c in flat), rel=1e-9)
    with pytest.raises(ValueError, match="block_size"):
        preemption_cost(0, 10, **OPT_13B)


def test_the_simulator_swaps_without_recomputing_and_fig_19_holds_on_a_workload() -> None:
    from pagedkv_edu.sim.simulate import preemption_overhead, simulate
    from pagedkv_edu.workload import copilot50

    reqs = copilot50(0, 24)
    swap = simulate(reqs, "paged", 4 * 2048, block_size=16, preemption_mode="swap")
    recompute = simulate(reqs, "paged", 4 * 2048, block_size=16)
    assert swap.preemptions > 0 and swap.recomputed_tokens == 0 < recompute.recomputed_tokens
    assert swap.swapped_blocks > 0 and swap.total_steps <= recompute.total_steps
    small, large = preemption_overhead(reqs, [1, 64], 4 * 2048, **OPT_13B)
    assert small.swap_s > small.recompute_s and large.swap_s < large.recompute_s
    with pytest.raises(ValueError, match="preemption_mode"):
        simulate(reqs, "paged", 4 * 2048, preemption_mode="drop")


@pytest.mark.slow
def test_smollm2_swap_and_recompute_give_transformers_tokens() -> None:
    """SmolLM2-135M, real weights: a pool too small for four requests, preempted by swap and by recompute."""
    smol = load_model("smollm2-135m")
    texts = ["The capital of France is", "A KV cache stores", "Paged attention splits the cache into",
             "Continuous batching means"]
    prompts = [smol.tokenizer(t)["input_ids"] for t in texts]
    reference = generate(smol.model, prompts, 16).tokens
    runs = {}
    for mode in ("swap", "recompute"):
        engine = LLMEngine(smol.model, kv_budget_tokens=48, block_size=4, max_seq_len=64, watermark=0.0,
                           preemption_mode=mode)
        for p in prompts:
            engine.add_request(p, SamplingParams(max_tokens=16, ignore_eos=True))
        out = {}
        while engine.has_unfinished:
            for o in engine.step():
                out[o.request_id] = o.token_ids
        assert engine.scheduler.num_preemptions > 0
        runs[mode] = [out[i] for i in range(len(prompts))]
    assert runs["swap"] == runs["recompute"] == reference
