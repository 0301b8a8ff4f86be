"""workload: the seeded seed-000 generator every chapter shares."""

from __future__ import annotations

import pytest

from pagedkv_edu.sim.sharing import few_shot_variant
from pagedkv_edu.workload import (MAX_SEQ_LEN, NUM_CONSULTANTS, OUTPUT_TOKENS, QUERY_TOKENS, RETRIEVED_TOKENS,
                                  SYSTEM_PROMPT, SYSTEM_PROMPT_TOKENS, Request, consultant_prompts, copilot50,
                                  prompt_token_ids)


def test_copilot50_has_the_articles_shape() -> None:
    """200 system + 400-800 retrieved + 25 query tokens (625-1,025); 100-500 output; all fit 2,048."""
    reqs = copilot50()
    assert len(reqs) == NUM_CONSULTANTS == 50
    assert [r.request_id for r in reqs] == list(range(50))
    lo = SYSTEM_PROMPT_TOKENS + RETRIEVED_TOKENS[0] + QUERY_TOKENS
    hi = SYSTEM_PROMPT_TOKENS + RETRIEVED_TOKENS[1] + QUERY_TOKENS
    assert (lo, hi) == (625, 1025)
    for r in reqs:
        assert lo <= r.prompt_len <= hi
        assert OUTPUT_TOKENS[0] <= r.output_len <= OUTPUT_TOKENS[1]
        assert r.final_len == r.prompt_len + r.output_len <= MAX_SEQ_LEN
        assert r.arrival_step == 0 and r.shared_prefix_len == SYSTEM_PROMPT_TOKENS
    # The draws spread over the ranges rather than sitting on one value.
    assert len({r.prompt_len for r in reqs}) > 25 and len({r.output_len for r in reqs}) > 25


def test_copilot50_is_seeded() -> None:
    assert copilot50(3) == copilot50(3)
    assert copilot50(3) != copilot50(4)
    assert copilot50(0, 10) == copilot50(0, 10)


def test_output_scale_shrinks_outputs_and_keeps_prompts() -> None:
    full, fifth = copilot50(1), copilot50(1, output_scale=0.2)
    assert [r.prompt_len for r in fifth] == [r.prompt_len for r in full]
    for a, b in zip(full, fifth):
        assert b.output_len == max(1, round(a.output_len * 0.2))


def test_arrival_rate_spreads_arrivals_in_order() -> None:
    reqs = copilot50(2, arrival_rate=0.5)
    steps = [r.arrival_step for r in reqs]
    assert steps == sorted(steps) and steps[-1] > 0
    # Mean gap of a Poisson process at 0.5 per step is 2 steps; 50 arrivals land well beyond step 25.
    assert steps[-1] > 25


@pytest.mark.parametrize("kwargs, bad", [
    (dict(num_requests=0), "0"), (dict(num_requests=-3), "-3"),
    (dict(output_scale=0.0), "0.0"), (dict(output_scale=1.5), "1.5"),
    (dict(arrival_rate=0.0), "0.0"), (dict(arrival_rate=-1.0), "-1.0"),
])
def test_bad_workload_parameters_are_refused_by_value(kwargs, bad) -> None:
    with pytest.raises(ValueError, match=f"got {bad}"):
        copilot50(**kwargs)


@pytest.mark.parametrize("kwargs, bad", [
    (dict(prompt_len=-1, output_len=5), "prompt_len=-1"),
    (dict(prompt_len=5, output_len=-2), "output_len=-2"),
    (dict(prompt_len=5, output_len=5, arrival_step=-1), "arrival_step=-1"),
])
def test_bad_requests_are_refused_by_value(kwargs, bad) -> None:
    with pytest.raises(ValueError, match=bad):
        Request(request_id=9, **kwargs)


def test_prompt_token_ids_share_the_system_prompt_and_nothing_else() -> None:
    a, b = copilot50()[:2]
    ids_a, ids_b = prompt_token_ids(a, 32000), prompt_token_ids(b, 32000)
    assert len(ids_a) == a.prompt_len and len(ids_b) == b.prompt_len
    assert ids_a[:SYSTEM_PROMPT_TOKENS] == ids_b[:SYSTEM_PROMPT_TOKENS]
    # Past the shared prefix the two prompts differ (matching positions only by chance).
    tail = zip(ids_a[SYSTEM_PROMPT_TOKENS:], ids_b[SYSTEM_PROMPT_TOKENS:])
    assert sum(x == y for x, y in tail) < 5
    assert all(100 <= t < 32000 and isinstance(t, int) for t in ids_a + ids_b)
    assert prompt_token_ids(a, 32000) == ids_a  # deterministic
    assert prompt_token_ids(a, 32000, seed=1) != ids_a


def test_prompt_token_ids_for_a_prompt_shorter_than_the_shared_prefix() -> None:
    short = Request(0, prompt_len=50, output_len=1)
    long = Request(1, prompt_len=300, output_len=1)
    assert prompt_token_ids(short, 1000) == prompt_token_ids(long, 1000)[:50]


def test_prompt_token_ids_refuse_a_vocabulary_below_low() -> None:
    with pytest.raises(ValueError, match="vocab_size=100"):
        prompt_token_ids(copilot50()[0], 100)


# --- real prompts -------------------------------------------------------------------------------
class WordTokenizer:
    """A stand-in tokenizer: one id per whitespace-separated word, ids from a growing vocabulary."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.words: list[str] = []

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = []
        for word in text.split():
            if word not in self.vocab:
                self.vocab[word] = len(self.words)
                self.words.append(word)
            ids.append(self.vocab[word])
        return ids

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.words[i] for i in ids)


@pytest.fixture(scope="module")
def llama_tokenizer():
    from pagedkv_edu.model.loading import load_model
    return load_model("tiny-random").tokenizer   # the Llama-3.2 tokenizer, installed offline


@pytest.mark.parametrize("scale", [1.0, 1 / 16, 1 / 32])
def test_consultant_prompts_have_the_workloads_exact_lengths(llama_tokenizer, scale) -> None:
    requests = copilot50(0, length_scale=scale)
    prompts = consultant_prompts(requests, llama_tokenizer, length_scale=scale)
    assert [len(p) for p in prompts] == [r.prompt_len for r in requests]
    shared = requests[0].shared_prefix_len
    assert len({tuple(p[:shared]) for p in prompts}) == 1                     # one system prompt, same ids
    assert len({tuple(p[shared:]) for p in prompts}) == len(prompts)          # the rest is each request's own
    assert all(isinstance(t, int) and 0 <= t < len(llama_tokenizer) for p in prompts for t in p)
    assert consultant_prompts(requests, llama_tokenizer, length_scale=scale) == prompts   # seeded


def test_consultant_prompts_read_as_the_articles_request(llama_tokenizer) -> None:
    """System prompt, then hotel listings, then the consultant's 25-token question, as text."""
    request = copilot50(0)[0]
    prompt = consultant_prompts([request], llama_tokenizer)[0]
    shared = llama_tokenizer.decode(prompt[:SYSTEM_PROMPT_TOKENS])
    assert shared.startswith("You are OptiVerse Copilot") and SYSTEM_PROMPT.startswith(shared)
    own = llama_tokenizer.decode(prompt[SYSTEM_PROMPT_TOKENS:-QUERY_TOKENS])
    assert own.startswith("\nHotel listings:\n[0] ") and own.count("dollars a night") >= 5
    assert llama_tokenizer.decode(prompt[-QUERY_TOKENS:]).startswith("\nQuestion: ")


def test_consultant_prompts_extend_the_shared_part_for_few_shot() -> None:
    tok = WordTokenizer()
    requests = few_shot_variant(copilot50(0, 4), 5)
    prompts = consultant_prompts(requests, tok, seed=1)
    shared = requests[0].shared_prefix_len
    assert shared > SYSTEM_PROMPT_TOKENS and len({tuple(p[:shared]) for p in prompts}) == 1
    assert "Example listing:" in tok.decode(prompts[0][:shared])
    assert consultant_prompts(requests, tok, seed=2) != prompts


def test_consultant_prompts_refuse_bad_input() -> None:
    with pytest.raises(TypeError, match="encode"):
        consultant_prompts(copilot50(0, 2), object())
    with pytest.raises(ValueError, match="got 0"):
        consultant_prompts(copilot50(0, 2), WordTokenizer(), length_scale=0)
    short = Request(0, prompt_len=5, output_len=1)
    assert len(consultant_prompts([short], WordTokenizer())[0]) == 5
