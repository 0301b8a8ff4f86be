"""The request record and the five bugs of issue 20, each pinned by a test (tiny random Llama)."""

from __future__ import annotations

import random

import pytest

from pagedkv_edu.attention import paged_attention
from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.engine import LLMEngine, SamplingParams
from pagedkv_edu.core.request import Request, Status
from pagedkv_edu.engine.generate import generate
from pagedkv_edu.model.loading import load_model
from pagedkv_edu.core.prefix_cache import hash_block
from pagedkv_edu.core.scheduler import Scheduler
from pagedkv_edu.sim.simulate import simulate
from pagedkv_edu.workload import Request as Workload


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random")


def _prompts(model, n: int, lo: int = 5, hi: int = 30, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    vocab = model.model.config.vocab_size
    return [[rng.randrange(100, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def _drain(engine: LLMEngine) -> dict:
    out = {}
    for _ in range(5000):
        if not engine.has_unfinished:
            break
        for o in engine.step():
            out[o.request_id] = o
    assert not engine.has_unfinished
    return out


# --- bug 5: identity, not value -------------------------------------------------------------------
def test_two_equal_records_are_two_sequences() -> None:
    params = SamplingParams(max_tokens=4)
    a, b = Request("x", [1, 2, 3], params), Request("x", [1, 2, 3], params)
    assert a != b and a == a
    manager = BlockManager(8, 2)
    scheduler = Scheduler(manager)
    scheduler.add(a)
    with pytest.raises(ValueError, match="already queued"):
        scheduler.add(a)
    scheduler.schedule()
    with pytest.raises(ValueError, match="not running"):
        scheduler.finish(b)          # equal fields, another sequence: nothing of a's is touched
    assert a.status is Status.RUNNING and manager.table(a).num_tokens == 3 and b not in manager


# --- the record: hashes once, status ------------------------------------------------------------
def test_each_block_is_hashed_once_per_request(monkeypatch) -> None:
    calls = []

    def counting(parent: bytes, ids) -> bytes:
        calls.append(tuple(ids))
        return hash_block(parent, ids)

    manager = BlockManager(32, 4, enable_prefix_caching=True, hash_fn=counting)
    scheduler = Scheduler(manager, max_num_batched_tokens=6)    # chunked: admission then growth
    r = Request("r", list(range(100, 118)))    # 18 tokens: 4 full blocks
    scheduler.add(r)
    for step in range(8):
        decided = scheduler.schedule()
        for s in decided.scheduled:
            if s.samples:
                s.seq.output_token_ids.append(7)
    hashed = list(calls)
    hashes = r.block_hashes(manager.prefix_cache.hasher, r.num_computed_tokens // 4)
    assert calls == hashed and len(hashes) == r.num_computed_tokens // 4 == 5   # all hashed while scheduled
    assert len(calls) == len(set(calls)) == len(hashes)   # no block hashed twice


def test_status_follows_the_sequence_through_preemption_and_finish() -> None:
    manager = BlockManager(3, 2)
    scheduler = Scheduler(manager)
    params = SamplingParams(max_tokens=3)
    a, b = Request("a", [1, 2], params), Request("b", [3, 4], params)
    scheduler.add(a)
    scheduler.add(b)
    assert a.status is Status.WAITING
    scheduler.schedule()
    assert a.status is b.status is Status.RUNNING and a.num_computed_tokens == 2
    for r in (a, b):
        r.output_token_ids.append(5)
    step = scheduler.schedule()       # a grows into block 3; b needs one more and is preempted
    assert step.preempted == [b] and b.status is Status.PREEMPTED and b.num_computed_tokens == 0
    scheduler.finish(a)
    assert a.status is Status.FINISHED and scheduler.preempted == [b]


# --- bug 4: last_step is a snapshot -------------------------------------------------------------
def test_last_step_block_tables_do_not_change_after_the_step(tiny) -> None:
    engine = LLMEngine(tiny.model, kv_budget_tokens=256, block_size=2, max_seq_len=64)
    engine.add_request(_prompts(tiny, 1)[0][:5], SamplingParams(max_tokens=8, ignore_eos=True))
    engine.step()
    first = engine.last_step
    tables = [s.new_block_ids for s in first.scheduled]
    for _ in range(5):
        engine.step()
    assert [s.new_block_ids for s in first.scheduled] == tables
    assert len(engine.block_manager.tables[0].block_ids) > len(tables[0])   # the live table did grow


def test_a_scheduled_sequences_share_cannot_be_changed() -> None:
    scheduler = Scheduler(BlockManager(8, 4))
    scheduler.add(Request("a", [1, 2, 3, 4, 5], SamplingParams(max_tokens=4)))
    (share,) = scheduler.schedule().scheduled
    with pytest.raises(AttributeError):
        share.num_new_tokens = 0
    assert (share.num_new_tokens, share.seq_len, share.new_block_ids) == (5, 5, (0, 1))


# --- bug 1: a reader's attention function survives a fork's copy-on-write -------------------------
def test_a_callable_backend_runs_parallel_sampling_with_copy_on_write(tiny) -> None:
    calls = []

    def mine(*args, **kwargs):
        calls.append(1)
        return paged_attention(*args, **kwargs)

    prompt = _prompts(tiny, 1, lo=7, hi=7)[0]           # 7 tokens, blocks of 4: a shared, half-full last block
    params = SamplingParams(max_tokens=4, n=3, temperature=1.0, seed=3, ignore_eos=True)
    engine = LLMEngine(tiny.model, kv_budget_tokens=256, block_size=4, max_seq_len=64, backend=mine)
    reference = LLMEngine(tiny.model, kv_budget_tokens=256, block_size=4, max_seq_len=64)
    engine.add_request(prompt, params)
    reference.add_request(prompt, params)
    out, ref = _drain(engine)[0], _drain(reference)[0]
    assert calls, "the reader's function ran"
    assert [c.token_ids for c in out.completions] == [c.token_ids for c in ref.completions]


# --- bug 2: generate() samples each prompt with its own generator --------------------------------
def test_generate_same_seed_same_text_whatever_shares_the_batch_and_equal_to_the_engine(tiny) -> None:
    prompts = _prompts(tiny, 4, seed=5)
    alone = generate(tiny.model, [prompts[0]], 10, temperature=1.0, seed=11).tokens[0]
    crowd = generate(tiny.model, prompts, 10, temperature=1.0, seed=11).tokens[0]
    reordered = generate(tiny.model, prompts[::-1], 10, temperature=1.0, seed=11).tokens[-1]
    assert alone == crowd == reordered
    engine = LLMEngine(tiny.model, kv_budget_tokens=1024, block_size=4, max_seq_len=64)
    engine.add_request(prompts[0], SamplingParams(max_tokens=10, temperature=1.0, seed=11, ignore_eos=True))
    assert _drain(engine)[0].token_ids == alone
    other = generate(tiny.model, [prompts[0]], 10, temperature=1.0, seed=12).tokens[0]
    assert other != alone          # the seed matters (a test that could not fail otherwise)


# --- bug 3: the simulator and the engine finish by one rule ---------------------------------------
def test_simulate_and_engine_finish_in_the_same_step_holding_the_same_tokens(tiny) -> None:
    lens = [(5, 3), (9, 1), (4, 6)]
    sim = simulate([Workload(i, p, o) for i, (p, o) in enumerate(lens)], "paged", 64, block_size=4,
                   max_seq_len=32)
    engine = LLMEngine(tiny.model, kv_budget_tokens=64, block_size=4, max_seq_len=32, max_num_batched_tokens=None,
                       watermark=0.0)
    prompts = _prompts(tiny, 3)
    for (p, o), ids in zip(lens, prompts):
        engine.add_request(ids[:p], SamplingParams(max_tokens=o, ignore_eos=True))
    finish, steps = {}, 0
    while engine.has_unfinished and steps < 50:
        for o in engine.step():
            finish[o.request_id] = steps
        steps += 1
    assert [r.finish_step for r in sim.requests] == [finish[i] for i in range(3)] == [2, 0, 5]
    assert sim.total_steps == steps
    # The longest holds prompt + output - 1 tokens at its last step: the last token is sampled, never stored.
    assert sim.steps[-1].used == 4 + 6 - 1


# --- performance, structurally: a prompt's own K/V are not gathered back; a cached prefix by whole blocks ---
def test_a_whole_prompt_prefill_reads_its_own_kv_without_a_gather(tiny) -> None:
    from torch.profiler import ProfilerActivity, profile

    layers = tiny.model.config.num_layers
    engine = LLMEngine(tiny.model, kv_budget_tokens=512, block_size=4, max_seq_len=128, max_num_batched_tokens=24)
    engine.add_request(_prompts(tiny, 1, lo=40, hi=40)[0], SamplingParams(max_tokens=2, ignore_eos=True))
    counts = []
    for _ in range(2):          # chunk 1 (its whole context is new), chunk 2 (the first chunk is cached)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            engine.step()
        counts.append(sum(e.name in ("aten::index", "aten::index_select") for e in prof.events()))
    # The two steps build the same metadata; the second gathers K and V of the earlier chunk in every layer
    # (and picks its sampling row: one index more). Gathering the first chunk too would leave a difference of 1.
    assert counts[1] - counts[0] == 2 * layers + 1
    plan = engine.kv_cache._plan[1]
    (_, n, length, blocks), = plan.prefills
    assert (n, length) == (16, 40) and blocks.numel() == 10   # 10 block ids, not 40 slot ids


def test_outputs_carry_each_tokens_time_for_ttft_and_itl(tiny) -> None:
    engine = LLMEngine(tiny.model, kv_budget_tokens=256, block_size=4, max_seq_len=64)
    engine.add_request(_prompts(tiny, 1)[0], SamplingParams(max_tokens=4, ignore_eos=True))
    out = _drain(engine)[0]
    assert len(out.token_times) == 4 and list(out.token_times) == sorted(out.token_times)
    assert out.token_times[0] == out.first_token_time and out.inter_token_latency > 0


def test_a_caller_can_drive_forks_itself_as_beam_search_will(tiny) -> None:
    from pagedkv_edu.engine import Status

    prompt = _prompts(tiny, 1, lo=7, hi=7)[0]                 # 7 tokens in blocks of 4: a shared, half-full block
    engine = LLMEngine(tiny.model, kv_budget_tokens=256, block_size=4, max_seq_len=64, keep_logprobs=True)
    rid = engine.add_request(prompt, SamplingParams(max_tokens=8))
    step, logits = engine.forward_step()
    parent = engine.requests[rid]
    first, second = logits[0].topk(2).indices.tolist()
    child = engine.fork_sequence(parent)
    assert (child.request_id, child.index, child.seq_id) == (rid, 1, f"r{rid}.1") and child.status is Status.RUNNING
    assert child.num_computed_tokens == parent.num_computed_tokens and child.output_token_ids == parent.output_token_ids
    assert engine.block_manager.block_ids(child) == engine.block_manager.block_ids(parent)
    engine.append_token(parent, first)
    engine.append_token(child, second)
    step, logits = engine.forward_step()
    assert [s.seq for s in step.scheduled] == [parent, child] and step.copies   # the half-full block is copied
    assert logits.shape[0] == 2
    assert engine.free_sequence(child) == [] and child.status is Status.FINISHED
    assert child.seq_id not in engine.block_manager.tables
    (out,) = engine.finish_sequence(parent, "length")
    assert out.token_ids == [first] and len(out.completions) == 1
    assert engine.block_manager.pool.num_free == engine.block_manager.pool.num_blocks and not engine.has_unfinished


def test_keep_logprobs_leaves_each_sequences_last_distribution_on_its_record(tiny) -> None:
    engine = LLMEngine(tiny.model, kv_budget_tokens=256, block_size=4, max_seq_len=64, keep_logprobs=True)
    rid = engine.add_request(_prompts(tiny, 1)[0], SamplingParams(max_tokens=3))
    engine.step()
    lp = engine.requests[rid].last_logprobs
    assert lp.shape == (tiny.model.config.vocab_size,) and abs(float(lp.exp().sum()) - 1) < 1e-4
    assert int(lp.argmax()) == engine.requests[rid].output_token_ids[-1]     # greedy took the most likely


# --- item 5: the runner's table is kept from the changes the scheduler sends ----------------------
@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_the_runners_table_follows_the_block_manager_through_forks_hits_and_preemptions(tiny, mode) -> None:
    """Each scheduled sequence brings only the ids its table gained; the runner's rows equal the live tables."""
    engine = LLMEngine(tiny.model, kv_budget_tokens=48, block_size=3, max_seq_len=40, watermark=0.0,
                       enable_prefix_caching=True, preemption_mode=mode, max_num_batched_tokens=16)
    shared = _prompts(tiny, 1, lo=7, hi=7, seed=3)[0]
    for i, prompt in enumerate(_prompts(tiny, 5, lo=2, hi=8, seed=4)):
        engine.add_request(shared + prompt, SamplingParams(n=2 if i % 2 else 1, max_tokens=8, ignore_eos=True,
                                                           temperature=1.0, seed=i))
    sent = whole = 0
    while engine.has_unfinished:
        engine.step()
        for s in engine.last_step.scheduled:
            sent += len(s.new_block_ids)
            whole += -(-s.seq_len // 3)          # the blocks a whole-table copy would have sent
        rows = engine.runner.tables
        for seq in engine.scheduler.running:
            if seq.seq_id in rows.order:
                assert rows.ids(seq.seq_id) == engine.block_manager.block_ids(seq), seq.seq_id
    assert engine.scheduler.num_preemptions > 0 and engine.scheduler.counts.prefix_hit_tokens > 0
    assert sent < whole / 2          # changes, not snapshots
