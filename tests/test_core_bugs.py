"""The nine bugs the architecture review of issue 27 found by reading, one test each (each failed on the old core)."""

from __future__ import annotations

import pytest

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_pool import BlockPool
from pagedkv_edu.core.prefix_cache import NO_HIT
from pagedkv_edu.core.request import Request, SamplingParams, Status
from pagedkv_edu.core.scheduler import Scheduler
from pagedkv_edu.core.swap import SwapSpace
from pagedkv_edu.engine.engine import LLMEngine
from pagedkv_edu.engine.runner import StandInRunner
from pagedkv_edu.viz.snapshot import snapshot


@pytest.fixture(scope="module")
def tiny_model():
    from pagedkv_edu.model.loading import load_model

    return load_model("tiny-random").model


def state(m: BlockManager) -> tuple:
    """Everything a refusal must leave as it was: the free queue, the counts, the tables, the host tables."""
    return (m.pool.free_ids(), list(m.pool.ref_counts), {s.seq_id: m.block_ids(s) for s in m.sequences},
            {s.seq_id: list(ids) for s, ids in m.swap.tables.items()} if m.swap else None,
            m.prefix_cache.num_cached_blocks if m.prefix_cache else None)


def test_1_a_sequence_that_can_outgrow_max_seq_len_is_refused_at_add_and_nothing_is_queued() -> None:
    """Old: ``Scheduler.add`` checked only the pool, ``schedule`` popped the sequence and ``admit`` raised on
    max_seq_len: the sequence left both queues and the step was half applied. Now ``add`` refuses it."""
    manager = BlockManager(16, 4, max_seq_len=20)
    scheduler = Scheduler(manager)
    seq = Request("long", list(range(10)), SamplingParams(max_tokens=12))   # up to 10 + 11 = 21 tokens
    with pytest.raises(ValueError, match="up to 21 tokens can never fit"):
        scheduler.add(seq)
    assert not scheduler.waiting and not scheduler.running and manager.pool.num_free == 16
    fits = Request("fits", list(range(10)), SamplingParams(max_tokens=11))   # 20 tokens at most
    scheduler.add(fits)
    assert [s.seq for s in scheduler.schedule().scheduled] == [fits]


def test_1_a_head_that_does_not_fit_stays_at_the_head_and_nothing_changes() -> None:
    manager = BlockManager(4, 4)
    scheduler = Scheduler(manager)
    short = SamplingParams(max_tokens=2)
    first, second = Request("a", list(range(12)), short), Request("b", list(range(8)), short)
    scheduler.add(first)
    scheduler.add(second)
    step = scheduler.schedule()
    assert step.admitted == [first] and list(scheduler.waiting) == [second]
    assert second.status is Status.WAITING and second not in manager and manager.pool.num_free == 1


def test_2_swapping_back_in_checks_before_it_changes_anything() -> None:
    """Old: ``swap_in`` took device blocks, then asked the swap space, which could raise. Now one ``admit``
    checks the device blocks and the watermark first, and a refusal leaves host and device blocks as they were."""
    manager = BlockManager(4, 4, swap=SwapSpace(4, 4))
    victim, other = Request("v", list(range(8))), Request("o", list(range(4)))
    assert manager.admit(victim, 8) is not None
    victim.num_computed_tokens = 8
    assert manager.swap_out(victim)
    assert manager.admit(other, 4) is not None and manager.admit(Request("p", list(range(8))), 8) is not None
    before = state(manager)
    assert manager.admit(victim, 0) is None          # 2 device blocks needed, 1 free
    assert state(manager) == before and victim in manager.swap
    manager.release(manager.sequences[-1])
    table = manager.admit(victim, 0)
    assert table is not None and len(table) == 2 and victim not in manager.swap
    assert manager.take_copies().swap_in == list(zip(before[3]["v"], table))


def test_3_generate_runs_the_backend_it_is_given_on_the_contiguous_cache(tiny_model) -> None:
    """Old: ``generate(cache="contiguous", backend="triton")`` checked the backend and then built a torch store."""
    from pagedkv_edu.engine.generate import generate

    result = generate(tiny_model, [[1, 2, 3], [4, 5, 6, 7]], 3, cache="contiguous", backend="triton")
    assert set(result.attention.values()) <= {"triton-decode", "triton-unified"}, result.attention
    torch_run = generate(tiny_model, [[1, 2, 3], [4, 5, 6, 7]], 3, cache="contiguous")
    assert result.tokens == torch_run.tokens and set(torch_run.attention.values()) == {"torch-gather"}


def test_4_held_slots_have_one_definition_for_the_manager_and_its_picture() -> None:
    """Old: ``usage()`` counted blocks held outside any table, ``Snapshot.allocated_slots`` did not."""
    manager = BlockManager.over(BlockPool.from_free_order(8, 4, [7, 1, 3]))   # 5 blocks held by others
    seq = Request("a", None, num_prompt_tokens=6)
    manager.admit(seq, 6)
    seq.num_computed_tokens = 6
    usage, picture = manager.usage(), snapshot(manager)
    assert usage.held_slots == picture.allocated_slots == 8          # blocks 7 and 1, not the other requests'
    assert usage.stored_tokens == picture.num_tokens == 6
    assert manager.pool.num_used == 7                                # the pool still counts every held block


def test_4_a_finished_sequence_kept_in_memory_counts_as_held_in_the_stats_and_the_picture() -> None:
    engine = LLMEngine(StandInRunner(), memory=BlockManager(8, 4), max_seq_len=32, free_finished=False)
    engine.add_request([1, 2, 3, 4, 5], SamplingParams(max_tokens=2))
    while engine.has_unfinished:
        engine.step()
    stats, picture = engine.stats(), snapshot(engine.memory)
    assert stats.kv_held_slots == picture.allocated_slots == 8 and stats.kv_tokens == picture.num_tokens == 6


def test_5_a_record_hashed_by_one_cache_is_refused_by_a_cache_that_hashes_differently() -> None:
    """Old: ``Request.hashes`` kept whatever hash function made them, and a second manager reused them."""
    tokens = list(range(12))
    first = BlockManager(8, 4, enable_prefix_caching=True)
    second = BlockManager(8, 4, enable_prefix_caching=True, hash_fn=lambda parent, ids: bytes([sum(ids) % 251]))
    seq = Request("a", tokens)
    first.lookup(seq)
    with pytest.raises(ValueError, match="hashed with"):
        second.lookup(seq)
    assert second.lookup(Request("a", tokens)) == NO_HIT     # a fresh record is hashed by the second cache


def test_6_a_beam_search_that_fails_midway_raises_its_own_error_and_frees_every_block(tiny_model, monkeypatch) -> None:
    """Old: ``finally`` freed beams ``_regroup`` had freed already, and that second error hid the first."""
    from pagedkv_edu.engine.beam import BeamSearchParams, beam_search

    engine = LLMEngine(tiny_model, kv_budget_tokens=256, block_size=4, max_seq_len=64)
    real_fork, calls = engine.fork_sequence, []

    def failing_fork(parent: Request, *args: object, **kwargs: object) -> Request:
        """The first step's two forks go through; a later one fails, after that step's losers were freed."""
        calls.append(parent)
        if len(calls) > 2:
            raise RuntimeError("the fork failed")
        return real_fork(parent, *args, **kwargs)

    monkeypatch.setattr(engine, "fork_sequence", failing_fork)
    with pytest.raises(RuntimeError, match="the fork failed"):
        beam_search(engine, [1, 2, 3, 4, 5], BeamSearchParams(num_beams=3, max_tokens=6))
    assert len(calls) == 3 and engine.memory.pool.num_free == engine.memory.pool.num_blocks and not engine.memory.sequences


def test_7_outputs_tables_and_block_ids_are_copies() -> None:
    """Old: ``RequestOutput.prompt_token_ids`` was the engine's own list (shared with every fork), and
    ``table()``, ``block_ids()`` and ``fork()`` returned the manager's live objects."""
    engine = LLMEngine(StandInRunner(), memory=BlockManager(16, 4), max_seq_len=32)
    engine.add_request([1, 2, 3, 4, 5], SamplingParams(max_tokens=3, n=2))
    outputs = []
    while engine.has_unfinished:
        outputs += engine.step()
    (out,) = outputs
    out.prompt_token_ids.append(99)
    out.completions[0].token_ids.append(99)
    assert engine.requests[0].prompt_token_ids == [1, 2, 3, 4, 5] and len(engine.requests[0].output_token_ids) == 3
    manager = BlockManager(8, 4)
    seq = Request("a", None, num_prompt_tokens=6)
    manager.admit(seq, 6)
    seq.num_computed_tokens = 6
    manager.block_ids(seq).append(7)
    manager.table(seq).block_ids.append(7)
    assert manager.block_ids(seq) == [0, 1] and manager.fork(seq, Request("b", None, num_prompt_tokens=6)) is None


def test_8_a_lookup_checks_what_the_block_holds_not_only_its_hash() -> None:
    """The lookup matches a block by hash alone (as vLLM does), then checks the parent hash and the tokens the
    block holds: with a hash that collides on purpose, another prompt finds nothing (the old lookup needed the
    parent's record by identity; the invariant that a child is evicted before its parent is tested by the
    hypothesis machine in test_properties)."""
    weak = BlockManager(8, 4, enable_prefix_caching=True, hash_fn=lambda parent, ids: bytes([sum(ids) % 7]))
    cached = Request("a", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    weak.admit(cached, 9)
    colliding = Request("b", [4, 3, 2, 1, 5, 6, 7, 8, 9])      # the same sums, other tokens
    assert weak.lookup(colliding) == NO_HIT
    assert weak.lookup(Request("c", [1, 2, 3, 4, 5, 6, 7, 8, 0])).num_tokens == 8


def test_9_prefix_hit_tokens_measures_each_request_against_the_first_prompt_only() -> None:
    """Old: each measured request was admitted (its blocks registered) and released, so the next one found its
    blocks too, against the docstring. Two identical requests after the first now find only the shared prefix."""
    from pagedkv_edu.sim.block_size import prefix_hit_tokens
    from pagedkv_edu.workload import Request as WorkloadRequest

    first, twin = WorkloadRequest(0, 300, 10), WorkloadRequest(1, 300, 10)
    assert prefix_hit_tokens([first, twin, twin], 16) == 192      # 200 shared tokens: 12 full blocks of 16
