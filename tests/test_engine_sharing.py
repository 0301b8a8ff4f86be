"""Chapter 7 in the engine, on the tiny random model: prefix caching and parallel sampling change no token."""

from __future__ import annotations

import json
import random

import pytest

from pagedkv_edu.engine import LLMEngine, SamplingParams
from pagedkv_edu.model.loading import load_model

B = 4
GREEDY = SamplingParams(max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random")


def _engine(model, **kw) -> LLMEngine:
    kw.setdefault("kv_budget_tokens", 1024)
    return LLMEngine(model.model, model.tokenizer, block_size=B, max_seq_len=96, **kw)


def _prompts(n: int, shared: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    system = [rng.randrange(100, 30000) for _ in range(shared)]
    return [system + [rng.randrange(100, 30000) for _ in range(rng.randint(2, 9))] for _ in range(n)]


def _drain(engine: LLMEngine) -> dict:
    outputs = {}
    while engine.has_unfinished:
        outputs.update((o.request_id, o) for o in engine.step())
    return outputs


def test_prefix_caching_changes_no_token_and_computes_only_the_uncached_tail(tiny) -> None:
    prompts = _prompts(4, shared=13)                      # 3 full shared blocks and one token
    prompts.append(prompts[0][:16])                       # a prompt of exactly 4 blocks ...
    prompts.append(prompts[0][:16])                       # ... twice: the copy may reuse only 3 of them
    plain = _engine(tiny).generate(prompts, GREEDY, use_tqdm=False)
    engine = _engine(tiny, enable_prefix_caching=True)
    cached = engine.generate(prompts, GREEDY, use_tqdm=False)
    assert [o.token_ids for o in cached] == [o.token_ids for o in plain]
    # All six arrive in one step: the first computes the system prompt, the others share it at once.
    assert [o.num_cached_tokens for o in cached] == [0, 12, 12, 12, 12, 12]
    stats = engine.history[-1]
    assert stats.tokens.prefix_hit_tokens == 60 and stats.tokens.prefill_tokens == sum(map(len, prompts)) - 60
    # A second wave finds the blocks the first one freed (still cached: nothing evicted them).
    again = engine.generate(prompts[:2], GREEDY, use_tqdm=False)
    assert [o.token_ids for o in again] == [o.token_ids for o in plain[:2]]
    assert [o.num_cached_tokens for o in again] == [len(prompts[0]) - 1 - (len(prompts[0]) - 1) % B,
                                                    len(prompts[1]) - 1 - (len(prompts[1]) - 1) % B]
    assert engine.block_manager.pool.num_free == engine.block_manager.pool.num_blocks


def test_a_preempted_request_resumes_through_the_cache_with_the_same_tokens(tiny) -> None:
    prompts = _prompts(6, shared=8, seed=1)
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    reference = _engine(tiny).generate(prompts, params, use_tqdm=False)
    engine = _engine(tiny, kv_budget_tokens=112, watermark=0.0, enable_prefix_caching=True)   # 28 blocks
    ids = [engine.add_request(p, params) for p in prompts]
    outputs = _drain(engine)
    assert engine.scheduler.num_preemptions > 0
    assert engine.history[-1].tokens.resumed_hit_tokens > 0      # they came back through their own cached blocks
    assert [outputs[i].token_ids for i in ids] == [o.token_ids for o in reference]


def test_parallel_sampling_forks_and_gives_the_tokens_of_independent_requests(tiny) -> None:
    prompt = _prompts(1, shared=14, seed=2)[0]            # not a whole number of blocks: copy-on-write happens
    greedy = _engine(tiny).generate([prompt], GREEDY, use_tqdm=False)[0]
    engine = _engine(tiny)
    copies: list[tuple[int, int]] = []
    apply = engine.kv_cache.copy_blocks
    engine.kv_cache.copy_blocks = lambda pairs: (copies.extend(pairs), apply(pairs))
    out = engine.generate([prompt], SamplingParams(max_tokens=8, ignore_eos=True, n=3), use_tqdm=False)[0]
    assert [c.index for c in out.completions] == [0, 1, 2] and len(copies) == 2
    assert all(c.token_ids == greedy.token_ids for c in out.completions) and out.token_ids == greedy.token_ids

    sampled = SamplingParams(max_tokens=8, temperature=1.0, seed=5, ignore_eos=True, n=3)
    forked_engine = _engine(tiny, enable_prefix_caching=True)
    forked = forked_engine.generate([prompt], sampled, use_tqdm=False)[0]
    alone_engine = _engine(tiny)
    alone = alone_engine.generate([prompt] * 3, [SamplingParams(max_tokens=8, temperature=1.0, seed=5 + i,
                                                                ignore_eos=True) for i in range(3)], use_tqdm=False)
    assert [c.token_ids for c in forked.completions] == [o.token_ids for o in alone]
    assert len({tuple(o.token_ids) for o in alone}) > 1    # the samples really differ
    blocks = [max(s.kv_usage for s in e.history) * e.block_manager.pool.num_blocks
              for e in (forked_engine, alone_engine)]
    assert blocks[0] < blocks[1]                           # the prompt is held once, not three times
    assert forked.num_preemptions == 0 and forked.finish_reason == "length"


def test_edge_cases_and_bad_input(tiny) -> None:
    engine = _engine(tiny)
    rid = engine.add_request([101, 102, 103], SamplingParams(max_tokens=0, n=3))
    (out,) = engine.step()
    assert out.request_id == rid and [c.token_ids for c in out.completions] == [[], [], []]
    with pytest.raises(ValueError, match=r"n \(the number of completions\) must be a whole number >= 1"):
        SamplingParams(n=0)
    with pytest.raises(ValueError, match="needs policy='paged'"):
        _engine(tiny, policy="contiguous", enable_prefix_caching=True)
    contiguous = LLMEngine(tiny.model, tiny.tokenizer, policy="contiguous", kv_budget_tokens=192, max_seq_len=96)
    with pytest.raises(ValueError, match="parallel sampling needs policy='paged'"):
        contiguous.add_request([101, 102], SamplingParams(n=2))
    assert not contiguous.has_unfinished


def test_serve_bench_prefix_caching_reports_hit_rate_and_ttft_gain(capsys: pytest.CaptureFixture[str]) -> None:
    from pagedkv_edu.bench.serve import print_table
    from pagedkv_edu.cli import main

    assert main(["serve-bench", "--model", "tiny-random", "--num-requests", "4", "--length-scale", "0.0625",
                 "--output-scale", "0.05", "--block-size", "2", "--policy", "paged", "--prefix-caching",
                 "--few-shot", "5", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    gain, runs = record["prefix_caching"], record["runs"]
    assert record["shared_prefix_tokens"] == 62 and set(runs) == {"paged", "paged+prefix-cache"}
    assert gain["same_tokens"] and gain["ttft_gain"] > 0
    assert gain["prefill_tokens_saved"] == runs["paged+prefix-cache"]["prefix_hit_tokens"] == 3 * 62
    cached = runs["paged+prefix-cache"]
    assert gain["hit_rate"] == cached["prefix_hit_rate"] == round(3 * 62 / cached["prompt_tokens"], 4)
    print_table(record)
    table = capsys.readouterr().out
    assert "paged+prefix-cache" in table and f"prefix cache (62 shared tokens): hit rate {gain['hit_rate']:.1%}" in table
