"""Beam search on the block manager: transformers' top beam, its rules, and the blocks it shares and frees."""

from __future__ import annotations

import copy
import itertools
import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv_edu.core.block_table import blocks_needed
from pagedkv_edu.engine import LLMEngine, SamplingParams
from pagedkv_edu.engine.beam import BeamSearch, BeamSearchParams, beam_search, max_blocks
from pagedkv_edu.model.llama import Llama
from pagedkv_edu.model.loading import random_llama, tiny_config


@pytest.fixture(scope="module")
def peaked():
    """A two-layer random Llama with a 512-token vocabulary and a scaled LM head.

    At N(0, 0.02) a random model's next-token distribution is almost flat, so the k-th and
    (k+1)-th candidates differ by less than float32 noise between two implementations;
    scaling the head makes the gaps wide enough that both rank the candidates the same way.
    """
    config = tiny_config()
    config.vocab_size, config.pad_token_id, config.bos_token_id, config.eos_token_id = 512, 0, 1, 2
    hf = random_llama(config, seed=3)
    with torch.no_grad():
        hf.lm_head.weight.mul_(40)
    return hf, Llama.from_hf(hf)


def _hf_beams(hf, prompt: list[int], k: int, n: int, eos: int | None, **kw) -> list[list[int]]:
    """transformers' ``generate(num_beams=k, do_sample=False)``: every returned beam, cut after its EOS."""
    config = copy.deepcopy(hf.generation_config)
    config.eos_token_id = eos
    config.update(num_beams=k, do_sample=False, max_new_tokens=n, num_return_sequences=k, **kw)
    rows = hf.generate(torch.tensor([prompt]), generation_config=config)[:, len(prompt):].tolist()
    return [row[:row.index(eos) + 1] if eos is not None and eos in row else row for row in rows]


def _engine(model: Llama, eos: int | None = None, block_size: int = 4, budget: int = 1024, **kw) -> LLMEngine:
    return LLMEngine(model, None, kv_budget_tokens=budget, block_size=block_size, max_seq_len=64,
                     stop_token_ids=() if eos is None else (eos,), **kw)


# --- the same search as transformers ------------------------------------------------------------
def test_top_beam_equals_transformers_without_eos(peaked) -> None:
    hf, model = peaked
    for prompt, k in (([5, 300, 77, 123, 88, 100, 7], 4), ([9], 2), ([40, 41, 42, 43, 44], 3)):
        expected = _hf_beams(hf, prompt, k, 12, None)
        out = beam_search(_engine(model), prompt, BeamSearchParams(k, 12, ignore_eos=True, num_return_sequences=k))
        assert [list(h.token_ids) for h in out.hypotheses] == expected
        assert out.token_ids == expected[0]


def test_every_hypothesis_equals_transformers_with_eos_penalties_and_early_stopping(peaked) -> None:
    """An EOS that the beams really meet, under each length penalty and each early-stopping rule."""
    hf, model = peaked
    rng = random.Random(0)
    ended_early = 0
    for _ in range(2):
        prompt = [rng.randrange(3, 512) for _ in range(rng.randint(1, 9))]
        k, n = rng.choice([2, 3, 4]), rng.randint(6, 12)
        eos = _hf_beams(hf, prompt, k, n, None)[1][rng.randrange(1, 4)]   # a token a beam picks early
        for lp, stop in ((1.0, False), (1.0, True), (0.0, "never"), (2.0, "never"), (2.0, False), (-1.0, True)):
            expected = _hf_beams(hf, prompt, k, n, eos, length_penalty=lp, early_stopping=stop)
            params = BeamSearchParams(k, n, length_penalty=lp, early_stopping=stop, num_return_sequences=k)
            engine = _engine(model, eos, block_size=rng.choice([1, 3, 4, 5]))
            got = [list(h.token_ids) for h in beam_search(engine, prompt, params).hypotheses]
            assert got == expected, (prompt, k, n, eos, lp, stop)
            ended_early += sum(h[-1] == eos and len(h) < n for h in got)
            assert engine.block_manager.pool.num_free == engine.block_manager.pool.num_blocks
    assert ended_early > 5        # the cases above really finish hypotheses at EOS


def test_search_alone_is_exhaustive_when_the_beams_hold_every_sequence() -> None:
    """With k ≥ V^(n-1) beams and no EOS, beam search keeps every prefix: its top beam is the argmax."""
    vocab, n = 3, 3
    table = torch.log_softmax(torch.randn(40, vocab, generator=torch.Generator().manual_seed(1)), -1)

    def log_probs(prefix: tuple[int, ...]) -> torch.Tensor:   # a fixed random "model" of the prefix
        return table[sum(t * vocab ** i for i, t in enumerate(prefix)) % 40 + len(prefix)]

    search = BeamSearch(BeamSearchParams(vocab ** (n - 1), n, ignore_eos=True))
    while not search.done:
        search.advance(torch.stack([log_probs(b) for b in search.beams]))
    best = max(itertools.product(range(vocab), repeat=n),
               key=lambda s: sum(float(log_probs(s[:i])[s[i]]) for i in range(n)))
    assert search.best[0].token_ids == best


def test_a_finished_hypothesis_must_rank_among_the_top_k_candidates() -> None:
    """transformers' rule: an EOS candidate ranked k+1..2k is dropped, not finished."""
    search = BeamSearch(BeamSearchParams(2, 5), eos_token_ids=[3])
    step1 = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))   # EOS (3) ranks 4th of the 4 candidates
    assert search.advance(step1) == [(0, 0), (0, 1)]
    assert search.finished == []
    step2 = torch.log(torch.tensor([[0.1, 0.1, 0.1, 0.7], [0.9, 0.05, 0.03, 0.02]]))
    chosen = search.advance(step2)   # candidates: 0→EOS 0.35, 1→0 0.27, ...: the EOS ranks first
    assert [h.token_ids for h in search.finished] == [(0, 3)]
    assert math.isclose(search.finished[0].score, math.log(0.35) / 2, rel_tol=1e-5)
    assert chosen[0] == (1, 0) and all(t != 3 for _, t in chosen)


# --- memory: forks, copies, frees, no leaks ------------------------------------------------------
def test_beams_share_blocks_copy_on_write_and_free_everything(peaked) -> None:
    _, model = peaked
    engine = _engine(model, block_size=4)
    manager, prompt = engine.block_manager, [7, 8, 9, 10, 11, 12, 13, 14, 15]   # 2 full blocks and one token
    seen: list[bool] = []

    def check(step: int, m) -> None:
        tables = [t.block_ids for t in m.tables.values()]
        counts = {b: sum(b in t for t in tables) for t in tables for b in t}
        assert all(m.pool.ref_counts[b] == c for b, c in counts.items())      # a count per table holding it
        assert m.pool.num_used == len(counts)                                  # nothing held by nobody
        assert all(t[:2] == tables[0][:2] for t in tables)                     # the prompt's full blocks, shared
        seen.append(any(c > 1 for c in counts.values()))

    out = beam_search(engine, prompt, BeamSearchParams(4, 10, ignore_eos=True), on_step=check)
    assert len(seen) == 9 and all(seen)
    assert out.num_copies > 0                              # the half-full blocks were copied on write
    assert all(f.blocks_shared < f.blocks_copied for f in out.frames) and 0.3 < out.saving < 1
    assert all(len(f.tables) == 4 and f.blocks_copied == 4 * blocks_needed(f.num_tokens, 4) for f in out.frames)
    assert manager.pool.num_free == manager.pool.num_blocks and not manager.tables
    assert not engine.has_unfinished
    again = beam_search(engine, prompt, BeamSearchParams(4, 10, ignore_eos=True))   # the engine is reusable
    assert again.token_ids == out.token_ids


def test_a_prompt_prefilled_in_chunks_gives_the_same_beams(peaked) -> None:
    _, model = peaked
    prompt = list(range(20, 45))
    whole = beam_search(_engine(model), prompt, BeamSearchParams(3, 6, ignore_eos=True))
    chunked = beam_search(_engine(model, max_num_batched_tokens=8), prompt, BeamSearchParams(3, 6, ignore_eos=True))
    assert chunked.token_ids == whole.token_ids and len(chunked.frames) == len(whole.frames) == 5


def test_bad_input_is_refused_before_anything_changes(peaked) -> None:
    _, model = peaked
    params = BeamSearchParams(4, 10)
    busy = _engine(model)
    busy.add_request([1, 2, 3], SamplingParams(max_tokens=2))
    small = _engine(model, budget=4 * 6)                   # 6 blocks; 4 beams of 10 tokens need more
    for engine, prompt, p, match in (
        (busy, [5, 6], params, "idle"),
        (small, [5, 6], params, "may hold"),
        (_engine(model), [], params, "empty"),
        (_engine(model), [5, 600], params, "vocabulary"),
        (_engine(model), [5] * 60, params, "max_seq_len"),
        (_engine(model, max_num_seqs=3), [5, 6], params, "max_num_seqs"),
        (LLMEngine(model, None, policy="contiguous", kv_budget_tokens=256, max_seq_len=64), [5], params, "paged"),
    ):
        before = list(engine.block_manager.pool.ref_counts)
        with pytest.raises(ValueError, match=match):
            beam_search(engine, prompt, p)
        assert engine.block_manager.pool.ref_counts == before
    assert max_blocks(2, params, 4) == 0 + 4 * blocks_needed(11, 4) > small.block_manager.pool.num_blocks
    for bad in (dict(num_beams=0, max_tokens=3), dict(num_beams=2, max_tokens=0),
                dict(num_beams=2, max_tokens=3, early_stopping="sometimes"),
                dict(num_beams=2, max_tokens=3, num_return_sequences=3)):
        with pytest.raises(ValueError):
            BeamSearchParams(**bad)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.integers(1, 20), st.integers(1, 7), st.randoms(use_true_random=False))
def test_search_memory_never_exceeds_its_bound_and_never_leaks(prompt_len: int, k: int, steps: int, block_size: int,
                                                                rng: random.Random) -> None:
    """Random log-probs drive the search on a real block manager (the sharing module's replay)."""
    from pagedkv_edu.sim.sharing import beam_blocks

    search = BeamSearch(BeamSearchParams(k, steps, ignore_eos=True))
    genealogy = []
    while not search.done:
        chosen = search.advance(torch.randn(len(search.beams), 5, generator=torch.Generator().manual_seed(rng.randrange(1 << 30))))
        if chosen:
            genealogy.append([p for p, _ in chosen])
    if not genealogy:
        return
    memory = beam_blocks(prompt_len, genealogy, block_size)
    bound = max_blocks(prompt_len, BeamSearchParams(k, len(genealogy) + 1), block_size)
    assert all(s <= min(i, bound) for s, i in zip(memory.shared, memory.independent))


@pytest.mark.slow
def test_top_beam_equals_transformers_on_smollm2() -> None:
    """Real weights, transformers' defaults (EOS on, length_penalty=1.0, early_stopping=False), three held prompts."""
    from pagedkv_edu.model.loading import load_model

    smol = load_model("smollm2-135m")
    ended = 0
    for text in ("What is the capital of France?", "Write a haiku about memory.",
                 "Explain what a KV cache is in one sentence."):
        prompt = smol.encode(text)
        expected = smol.hf_model.generate(torch.tensor([prompt]), num_beams=4, do_sample=False,
                                          max_new_tokens=16)[0, len(prompt):].tolist()
        engine = LLMEngine(smol.model, smol.tokenizer, kv_budget_tokens=2048, block_size=8,
                           stop_token_ids=smol.stop_token_ids)
        out = beam_search(engine, prompt, BeamSearchParams(4, 16))
        assert out.token_ids == expected, text
        ended += out.token_ids[-1] in smol.stop_token_ids
        assert engine.block_manager.pool.num_free == engine.block_manager.pool.num_blocks
    assert ended >= 1     # one of them ends at its EOS, so the finished-hypothesis rules ran
