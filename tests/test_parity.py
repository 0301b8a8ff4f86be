"""Greedy decoding through the paged cache matches transformers' ``generate``, token for token.

SmolLM2-135M with its real weights: 20 prompts x 64 new tokens, decoded as one batch by our
decoder and by transformers (left-padded). Padding can in principle move transformers' logits
by a rounding error and flip a near-tie; on these prompts it moves them by less than 1e-4 and
no token changes, which the shorter runs below confirm one prompt at a time (chat prompts, and
Llama-3.2-1B's exact architecture with random weights). Each run prints the largest per-step
|logit difference|.
"""

from __future__ import annotations

import pytest
import torch

from pagedkv_edu.engine.generate import generate
from pagedkv_edu.model import load_model

PROMPTS = (
    "The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
    "The three laws of thermodynamics are", "To make a good cup of tea, you should",
    "import numpy as np\n\ndef softmax(x):", "The history of the Roman Empire",
    "Photosynthesis is the process by which",
    "A haiku about autumn:\n", "The main difference between TCP and UDP is", "Dear hiring manager,",
    "In machine learning, overfitting means", "The recipe for pancakes:\n1.", "Water boils at",
    "SELECT name, age FROM users WHERE", "The best way to learn a new language is", "Albert Einstein was born in",
    "The sky is blue because", "Here is a list of prime numbers: 2, 3, 5,", "The KV cache of a transformer stores",
)


def transformers_greedy(hf_model, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    out = hf_model.generate(torch.tensor([prompt], device=hf_model.device), max_new_tokens=n, do_sample=False,
                            output_logits=True, return_dict_in_generate=True)
    return out.sequences[0, len(prompt):].tolist(), torch.stack(out.logits)[:, 0].float().cpu()


def transformers_greedy_batch(loaded, prompts: list[list[int]], n: int) -> list[tuple[list[int], torch.Tensor]]:
    """One left-padded ``generate`` call; each row cut after its first stop token."""
    hf, pad = loaded.hf_model, loaded.hf_model.generation_config.pad_token_id
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=hf.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=hf.device)
    out = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, do_sample=False, pad_token_id=pad,
                      output_logits=True, return_dict_in_generate=True)
    logits = torch.stack(out.logits).float().cpu()          # [steps, batch, vocab]
    rows = []
    for i, row in enumerate(out.sequences[:, width:].tolist()):
        ends = [j for j, t in enumerate(row) if t in loaded.stop_token_ids]
        row = row[:ends[0] + 1] if ends else row
        rows.append((row, logits[:len(row), i]))
    return rows


def assert_parity(loaded, prompts: list[list[int]], n: int, batched: bool = False) -> float:
    """Our batched greedy run against transformers' (batched, or one prompt at a time); returns
    the largest |logit difference| of any step."""
    ours = generate(loaded.model, prompts, n, record_logits=True, stop_token_ids=loaded.stop_token_ids)
    if batched:
        references = transformers_greedy_batch(loaded, prompts, n)
    else:
        references = [transformers_greedy(loaded.hf_model, prompt, n) for prompt in prompts]
    worst = 0.0
    for i, (tokens, logits, (theirs, their_logits)) in enumerate(zip(ours.tokens, ours.step_logits, references)):
        first = next((j for j, (a, b) in enumerate(zip(tokens, theirs)) if a != b), min(len(tokens), len(theirs)))
        assert tokens == theirs, f"prompt {i}: ours and transformers' first differ at step {first}"
        worst = max(worst, float((logits - their_logits).abs().max()))
    print(f"\n{loaded.name}: {len(prompts)} prompts x up to {n} tokens identical; "
          f"largest per-step |logit difference| {worst:.2e}")
    return worst


@pytest.fixture(scope="module")
def smollm2():
    return load_model("smollm2-135m")


def test_smollm2_greedy_decoding_matches_transformers(smollm2):
    prompts = [smollm2.tokenizer(t)["input_ids"] for t in PROMPTS]
    assert len(prompts) >= 20
    assert assert_parity(smollm2, prompts, 64, batched=True) < 1e-3


def test_smollm2_chat_prompts_match_transformers_until_end_of_turn(smollm2):
    prompts = [smollm2.encode(q) for q in ("What is 2 + 2?", "Name three colours.")]
    assert smollm2.chat and smollm2.stop_token_ids == (smollm2.tokenizer.convert_tokens_to_ids("<|im_end|>"),)
    assert assert_parity(smollm2, prompts, 24) < 1e-3


def test_smollm2_triton_backend_matches_torch_backend(smollm2):
    prompts = [smollm2.tokenizer(t)["input_ids"] for t in PROMPTS[:2]]
    torch_run = generate(smollm2.model, prompts, 3, backend="torch", record_logits=True)
    triton_run = generate(smollm2.model, prompts, 3, backend="triton", record_logits=True)   # the interpreter is slow
    assert triton_run.attention == {"prefill": "triton-unified", "decode": "triton-decode"}   # prefill in Triton too
    assert triton_run.tokens == torch_run.tokens
    for a, b in zip(torch_run.step_logits, triton_run.step_logits):
        assert torch.allclose(a, b, atol=1e-3)


def test_smollm2_paged_and_contiguous_give_identical_tokens(smollm2):
    prompts = [smollm2.tokenizer(t)["input_ids"] for t in PROMPTS[:4]]
    paged = generate(smollm2.model, prompts, 12, block_size=4)
    contiguous = generate(smollm2.model, prompts, 12, cache="contiguous")
    assert paged.tokens == contiguous.tokens


def test_llama_3_2_1b_architecture_matches_transformers():
    loaded = load_model("llama-3.2-1b-random")
    cfg = loaded.model.config
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size,
            cfg.intermediate_size, cfg.vocab_size) == (16, 32, 8, 64, 2048, 8192, 128256)
    assert cfg.tie_word_embeddings and dict(cfg.rope_scaling)["factor"] == 32
    assert loaded.model.kv_bytes_per_token(torch.bfloat16) == 32 * 1024     # chapter 0's 32 KiB per token
    prompts = [loaded.tokenizer(t)["input_ids"] for t in ("The capital of France is", "Paged attention")]
    assert prompts[0][0] == loaded.tokenizer.bos_token_id == 128000
    assert assert_parity(loaded, prompts, 8) < 1e-3
