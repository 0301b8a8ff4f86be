"""Chapter 6's engine on the tiny random model: invariants, faults, and the contiguous baseline."""

from __future__ import annotations

import random

import pytest
import torch

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_pool import BlockPool
from pagedkv_edu.engine import LLMEngine, SamplingParams
from pagedkv_edu.engine.generate import generate
from pagedkv_edu.model.loading import load_model


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random")


def _prompts(model, n: int, lo: int = 5, hi: int = 40, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    vocab = model.model.config.vocab_size
    return [[rng.randrange(100, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def _engine(model, **kw) -> LLMEngine:
    kw.setdefault("kv_budget_tokens", 4096)
    kw.setdefault("block_size", 4)
    kw.setdefault("max_seq_len", 128)
    return LLMEngine(model.model, model.tokenizer, **kw)


def _run_all(engine: LLMEngine) -> list:
    outputs = []
    for _ in range(10_000):
        if not engine.has_unfinished:
            break
        outputs.extend(engine.step())
    assert not engine.has_unfinished, "the engine did not drain (deadlock?)"
    return outputs


def test_matches_static_generation_and_loses_nothing_under_pressure(tiny) -> None:
    prompts = _prompts(tiny, 10)
    reference = generate(tiny.model, prompts, 20).tokens
    engine = _engine(tiny, kv_budget_tokens=160, watermark=0.0)   # far too small for all at once
    ids = [engine.add_request(p, SamplingParams(max_tokens=20, ignore_eos=True)) for p in prompts]
    outputs = _run_all(engine)
    assert sorted(o.request_id for o in outputs) == ids                # none lost, none duplicated
    assert engine.scheduler.num_preemptions > 0                        # the pool really ran out mid-decode
    by_id = {o.request_id: o for o in outputs}
    for i, rid in enumerate(ids):                                       # recompute gives the same tokens
        assert by_id[rid].token_ids == reference[i], f"request {rid} (preempted {by_id[rid].num_preemptions}x)"
    pool = engine.block_manager.pool
    assert pool.num_free == pool.num_blocks and not engine.block_manager.tables   # all blocks back


def test_contiguous_baseline_gives_the_same_tokens_with_less_concurrency(tiny) -> None:
    prompts = _prompts(tiny, 8, seed=1)
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    paged = _engine(tiny, kv_budget_tokens=256)
    contiguous = _engine(tiny, policy="contiguous", kv_budget_tokens=256, max_seq_len=64)
    out_p = paged.generate(prompts, params, use_tqdm=False)
    out_c = contiguous.generate(prompts, params, use_tqdm=False)
    assert [o.token_ids for o in out_p] == [o.token_ids for o in out_c]
    assert max(s.num_running for s in contiguous.history) == 256 // 64
    assert max(s.num_running for s in paged.history) > 256 // 64
    assert contiguous.memory.pool.num_used == 0 and not contiguous.memory.tables


def test_seeded_sampling_is_reproducible_alone_or_in_a_crowd(tiny) -> None:
    prompt = _prompts(tiny, 1, seed=2)[0]
    params = SamplingParams(max_tokens=10, temperature=0.8, top_p=0.9, seed=1234, ignore_eos=True)
    alone = _engine(tiny).generate([prompt], params, use_tqdm=False)[0].token_ids
    crowd = _engine(tiny, kv_budget_tokens=96, watermark=0.0)
    others = [crowd.add_request(p, SamplingParams(max_tokens=10, temperature=1.0, ignore_eos=True))
              for p in _prompts(tiny, 5, seed=3)]
    mine = crowd.add_request(prompt, params)
    outputs = {o.request_id: o for o in _run_all(crowd)}
    assert len(outputs) == len(others) + 1
    assert outputs[mine].token_ids == alone
    different_seed = _engine(tiny).generate([prompt], SamplingParams(max_tokens=10, temperature=0.8, top_p=0.9,
                                                                      seed=99, ignore_eos=True), use_tqdm=False)
    assert different_seed[0].token_ids != alone


def test_a_request_that_can_never_fit_fails_alone(tiny) -> None:
    engine = _engine(tiny, kv_budget_tokens=64, max_seq_len=128)
    fine = engine.add_request(_prompts(tiny, 1)[0][:10], SamplingParams(max_tokens=4, ignore_eos=True))
    with pytest.raises(ValueError, match="can never fit"):
        engine.add_request(list(range(100, 180)), SamplingParams(max_tokens=4))
    outputs = _run_all(engine)
    assert [o.request_id for o in outputs] == [fine] and len(outputs[0].token_ids) == 4


def test_every_request_too_large_is_refused_and_the_engine_stays_usable(tiny) -> None:
    engine = _engine(tiny, kv_budget_tokens=32)
    for n in (40, 60, 100):
        with pytest.raises(ValueError, match=f"{n} tokens can never fit"):
            engine.add_request(list(range(100, 100 + n)), SamplingParams(max_tokens=1))
    assert not engine.has_unfinished and engine.block_manager.pool.num_free == 8


def test_a_request_that_would_outgrow_the_whole_pool_is_refused_up_front(tiny) -> None:
    """Its prompt fits but prompt + max_tokens - 1 cannot: refused at add_request, before it takes any memory."""
    engine = _engine(tiny, kv_budget_tokens=32, max_seq_len=128)   # 8 blocks of 4 = 32 slots
    with pytest.raises(ValueError, match="up to 59 tokens can never fit"):
        engine.add_request(list(range(100, 120)), SamplingParams(max_tokens=40, ignore_eos=True))
    assert not engine.has_unfinished and not engine.requests and engine.block_manager.pool.num_free == 8


def test_a_request_that_outgrows_the_free_blocks_alone_fails_with_a_reason(tiny) -> None:
    """Two of 8 blocks are held outside the engine: a request that fits the pool but not its 6 free blocks
    grows until it cannot be held even alone, then ends with an error and gives its blocks back."""
    pool = BlockPool.from_free_order(8, 4, range(6))
    engine = _engine(tiny, memory=BlockManager.over(pool, 128), max_seq_len=128)
    rid = engine.add_request(list(range(100, 120)), SamplingParams(max_tokens=12, ignore_eos=True))
    (out,) = _run_all(engine)
    assert out.request_id == rid and out.finish_reason.startswith("error")
    assert len(out.token_ids) == 6 * 4 - 20 + 1      # it sampled until its K/V filled the 6 free blocks
    assert engine.block_manager.pool.num_free == 6


def test_bad_input_is_refused_before_anything_changes(tiny) -> None:
    engine = _engine(tiny)
    with pytest.raises(ValueError, match="empty"):
        engine.add_request([])
    with pytest.raises(ValueError, match="empty"):
        engine.add_request("")
    with pytest.raises(ValueError, match="max_seq_len=128"):
        engine.add_request(list(range(100, 200)), SamplingParams(max_tokens=40))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.add_request([10**9])
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=-1)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="policy"):
        _engine(tiny, policy="bogus")
    assert not engine.has_unfinished and not engine.requests


def test_max_tokens_zero_finishes_without_memory(tiny) -> None:
    engine = _engine(tiny)
    rid = engine.add_request([101, 102, 103], SamplingParams(max_tokens=0))
    (out,) = engine.step()
    assert out.request_id == rid and out.token_ids == [] and out.finish_reason == "length"
    assert not engine.has_unfinished and engine.block_manager.pool.num_used == 0


def test_a_stop_string_hit_on_the_first_token(tiny) -> None:
    prompt = _prompts(tiny, 1, seed=5)[0]
    first = _engine(tiny).generate([prompt], SamplingParams(max_tokens=1), use_tqdm=False)[0]
    text = tiny.tokenizer.decode(first.token_ids, skip_special_tokens=True)
    assert text, "the first token decodes to nothing; pick another prompt"
    out = _engine(tiny).generate([prompt], SamplingParams(max_tokens=10, stop=(text,)), use_tqdm=False)[0]
    assert out.finish_reason == "stop" and out.token_ids == first.token_ids and out.text == ""


def test_stop_token_ids_end_a_request(tiny) -> None:
    prompt = _prompts(tiny, 1, seed=6)[0]
    full = _engine(tiny).generate([prompt], SamplingParams(max_tokens=6, ignore_eos=True), use_tqdm=False)[0]
    out = _engine(tiny).generate([prompt], SamplingParams(max_tokens=6, stop_token_ids=(full.token_ids[2],)),
                                 use_tqdm=False)[0]
    assert out.finish_reason == "stop" and out.token_ids == full.token_ids[:full.token_ids.index(full.token_ids[2]) + 1]


def test_stats_track_usage_and_throughput(tiny) -> None:
    engine = _engine(tiny, kv_budget_tokens=128)
    engine.generate(_prompts(tiny, 4, seed=7), SamplingParams(max_tokens=5, ignore_eos=True), use_tqdm=False)
    assert engine.history and max(s.kv_usage for s in engine.history) > 0
    last = engine.stats()
    assert last.generated_tokens == 20 and last.tokens_per_second > 0 and last.kv_usage == 0
    assert all(0 < s.kv_utilisation <= 1 for s in engine.history)
    torch.testing.assert_close(torch.tensor(engine.history[0].kv_tokens), torch.tensor(
        sum(len(p) for p in _prompts(tiny, 4, seed=7))))


# --- issue 13: one loop, chunked prefill, the caps and the defaults -------------------------------


def test_chunked_prefill_and_mixed_steps_give_the_same_tokens(tiny) -> None:
    """A token budget smaller than a prompt chunks it over steps, mixed with others' decodes."""
    prompts = _prompts(tiny, 6, lo=10, hi=40, seed=4)
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    whole = _engine(tiny, max_num_batched_tokens=None).generate(prompts, params, use_tqdm=False)
    engine = _engine(tiny, max_num_batched_tokens=16)
    steps = []
    while engine.has_unfinished or not steps:
        if not steps:
            for p in prompts:
                engine.add_request(p, params)
        engine.step()
        steps.append(engine.last_step)
    chunked = [engine.requests[i] for i in range(len(prompts))]
    assert [r.output_token_ids for r in chunked] == [o.token_ids for o in whole]
    assert all(s.num_tokens <= 16 for s in steps)
    assert any(any(s.is_prefill for s in st.scheduled) and not all(s.is_prefill for s in st.scheduled)
               for st in steps), "no step mixed a prefill chunk with decodes"
    assert any(not s.samples for st in steps for s in st.scheduled), "no prompt was split into chunks"


def test_max_num_seqs_counts_every_sample(tiny) -> None:
    engine = _engine(tiny, max_num_seqs=2)
    prompts = _prompts(tiny, 2, seed=5)
    engine.add_request(prompts[0], SamplingParams(max_tokens=4, n=2, ignore_eos=True))
    engine.add_request(prompts[1], SamplingParams(max_tokens=4, ignore_eos=True))
    peak = 0
    while engine.has_unfinished:
        engine.step()
        peak = max(peak, len(engine.scheduler.running))
    assert peak == 2
    with pytest.raises(ValueError, match="max_num_seqs=2"):
        engine.add_request(prompts[0], SamplingParams(n=3))


def test_contiguous_engine_builds_for_a_long_context_model_with_its_defaults(tiny) -> None:
    """Llama-3.2-1B's 131,072-token context must not become the per-sequence reservation."""
    import dataclasses

    from pagedkv_edu.engine.config import DEFAULT_MAX_SEQ_LEN
    from pagedkv_edu.model.llama import Llama

    m = tiny.model
    long = Llama(dataclasses.replace(m.config, max_position_embeddings=131_072), m.embed, m.layers, m.final_norm,
                 m.lm_head)
    engine = LLMEngine(long, policy="contiguous")
    assert engine.config.max_seq_len == DEFAULT_MAX_SEQ_LEN == 2048 and engine.memory.pool.capacity_tokens == 10 * 2048
    assert engine.memory.block_size == 2048     # one block per request: its reservation
    assert LLMEngine(long).config.max_seq_len == 131_072          # paged reserves nothing: the whole context
    out = engine.generate([_prompts(tiny, 1, seed=6)[0]], SamplingParams(max_tokens=3, ignore_eos=True),
                          use_tqdm=False)
    assert len(out[0].token_ids) == 3


def test_no_host_sync_per_layer_the_gather_plan_is_built_once_per_step(tiny, monkeypatch) -> None:
    """Every layer of a step reuses the step's gather indices: they are built once, at its first layer."""
    from pagedkv_edu.attention import kv_cache

    built = []
    original = kv_cache.gather_plan

    def counting(*args, **kwargs):
        built.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(kv_cache, "gather_plan", counting)
    engine = _engine(tiny)
    engine.generate(_prompts(tiny, 3, seed=7), SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False)
    assert len(built) == len(engine.history)   # one plan per step, whatever the number of layers


def test_mixed_steps_on_the_triton_decode_kernel_give_the_torch_tokens(tiny) -> None:
    """Decode rows of a mixed step go through the Triton kernel (interpreted on a CPU), prefill rows beside them."""
    prompts = _prompts(tiny, 3, lo=6, hi=14, seed=8)
    params = SamplingParams(max_tokens=3, ignore_eos=True)
    torch_out = _engine(tiny, max_num_batched_tokens=8).generate(prompts, params, use_tqdm=False)
    engine = _engine(tiny, max_num_batched_tokens=8, backend="triton")
    triton_out = engine.generate(prompts, params, use_tqdm=False)
    assert [o.token_ids for o in triton_out] == [o.token_ids for o in torch_out]


def test_the_runner_keeps_its_block_table_rows_in_batch_order_and_writes_only_what_changed() -> None:
    from types import SimpleNamespace

    from pagedkv_edu.engine.model_runner import BlockTableRows
    from pagedkv_edu.core.scheduler import ScheduledSeq

    def brings(seq_id, ids, at):
        return ScheduledSeq(SimpleNamespace(seq_id=seq_id), 1, 0, False, True, tuple(ids), at)

    rows = BlockTableRows(16)
    rows.arrange(["a"])
    rows.append_row(0, brings("a", [3, 5], 0))     # a fresh sequence: its whole table
    assert rows.table[0, :3].tolist() == [3, 5, -1]
    rows.table[0, 0] = 99                          # (a stale entry stays stale: proof nothing else is rewritten)
    rows.append_row(0, brings("a", [7], 2))
    assert rows.table[0, :3].tolist() == [99, 5, 7]
    rows.append_row(0, brings("a", [8], 2))        # copy-on-write replaced the last block
    assert rows.ids("a") == [99, 5, 8]
    others = [f"s{i}" for i in range(20)]
    rows.arrange(["a"] + others)                    # more sequences than rows: the table grows, "a" stays in row 0
    for i, seq_id in enumerate(others, 1):
        rows.append_row(i, brings(seq_id, [i], 0))
    assert rows.table.shape[0] >= 21 and rows.ids("a") == [99, 5, 8] and rows.ids("s19") == [20]
    table = rows.table
    rows.arrange(["a"] + others[:5])               # the same order, fewer scheduled: nothing moves
    assert rows.table is table and rows.order[6:] == others[5:]
    rows.release("a")                              # a sequence leaves: the rows after it move up one
    assert rows.order[:2] == ["s0", "s1"] and rows.table[0, 0] == 1 and rows.table[20].tolist() == [-1] * 16
    rows.arrange(["s3", "b", "s0"])                # a new order: rows follow their sequences, "b" starts empty
    assert rows.order[:3] == ["s3", "b", "s0"] and rows.ids("s3") == [4] and rows.table[1, 0] == -1
    assert rows.ids("s0") == [1] and sorted(rows.order) == sorted(["b"] + others)